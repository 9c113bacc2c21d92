"""High availability: one active instance per connector name, by a lease in Redis with a fencing token.

Every instance with `[ha] enabled` runs `run_with_lease`: it waits as a standby until it can
take the lease (`SET NX PX`), then streams. Each acquisition increments the connector's fence
counter; the new token goes with every checkpoint write, and a write whose token is older
than the newest is refused (`FencedError`): a leader that was paused (SIGSTOP, a long GC, a
network partition) and wakes up after another took over can never save an older position.
The leader renews the lease every lease_s / 3; when a renewal fails it stops at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

import redis

log = logging.getLogger("sluice.ha")

_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class Lease:
    def __init__(self, client: redis.Redis, connector: str, lease_s: float) -> None:
        self.client = client
        self.key = f"sluice:{connector}:lease"
        self.fence_key = f"sluice:{connector}:fence"
        self.instance = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.lease_ms = int(lease_s * 1000)
        self.token: int | None = None

    def try_acquire(self) -> bool:
        if not self.client.set(self.key, self.instance, nx=True, px=self.lease_ms):
            return False
        self.token = int(self.client.incr(self.fence_key))
        log.info("leader of %s with fencing token %d", self.key, self.token)
        return True

    def renew(self) -> bool:
        try:
            return bool(self.client.eval(_RENEW, 1, self.key, self.instance, self.lease_ms))
        except redis.RedisError as exc:
            log.warning("lease renewal failed: %s", exc)
            return False

    def release(self) -> None:
        try:
            self.client.eval(_RELEASE, 1, self.key, self.instance)
        except redis.RedisError as exc:
            log.warning("lease release failed (it expires by itself): %s", exc)


def keep_renewing(lease: Lease, every_s: float, lost: Callable[[], None]) -> threading.Event:
    """Renew in the background; on the first failure call `lost` and stop. Set the event to end."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(every_s):
            if not lease.renew():
                log.error("lost the lease of %s: stopping this instance", lease.key)
                lost()
                return

    threading.Thread(target=loop, name="lease-renewal", daemon=True).start()
    return done
