"""Replication commands, stream framing, positions and GTID sets: byte literals and round trips."""

from __future__ import annotations

import io
import random
import struct

import pytest

from connector.binlog.events import EventHeader, decode_previous_gtids
from connector.binlog.reader import Reader
from connector.errors import PositionError, ProtocolError, SequenceRestartError
from connector.position import MariadbGtidState, MysqlGtidSet, Position, binlog_sort_key, varlen
from connector.replica import packets
from connector.replica.client import DumpBuffer
from connector.replica.packets import PacketReader, frame


def reader_of(data: bytes) -> PacketReader:
    stream = io.BytesIO(data)

    def read(n: int) -> bytes:
        chunk = stream.read(n)
        if len(chunk) != n:
            raise EOFError(f"wanted {n} bytes, {len(chunk)} left")
        return chunk

    return PacketReader(read)


def test_register_slave_layout() -> None:
    # COM_REGISTER_SLAVE: 0x15, server_id, host, user, password (each length-prefixed), port, rank, master id
    assert packets.register_slave(7, "h1", "u", "", 3307) == bytes.fromhex("1507000000026831017500eb0c0000000000000000")


def test_binlog_dump_layout() -> None:
    assert packets.binlog_dump(9, "bin.000002", 1234, packets.BINLOG_SEND_ANNOTATE_ROWS_EVENT) == (
        bytes.fromhex("12d2040000020009000000") + b"bin.000002"
    )
    with pytest.raises(ProtocolError):
        packets.binlog_dump(9, "bin.000002", 2)


def test_binlog_dump_gtid_layout() -> None:
    data = MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7").encode()
    cmd = packets.binlog_dump_gtid(3, data)
    flags, server_id, name_len = struct.unpack_from("<HII", cmd, 1)
    assert (cmd[0], flags, server_id, name_len) == (0x1E, packets.BINLOG_THROUGH_GTID, 3, 0)
    pos, size = struct.unpack_from("<QI", cmd, 11)
    assert (pos, size, cmd[23:]) == (4, len(data), data)
    # Gtid_set::encode: count of sids, then sid bytes, interval count, [start, end) pairs
    assert data == (
        struct.pack("<Q", 1) + bytes.fromhex("3e11fa4771ca11e19e33c80aa9429562") + struct.pack("<Q", 2)
        + struct.pack("<qq", 1, 6) + struct.pack("<qq", 7, 8)
    )  # fmt: skip


def test_error_packet() -> None:
    error = packets.parse_error(b"\xff\xd4\x04#HY000Could not find first log file name in binary log index file")
    assert (error.code, error.state) == (1236, "HY000")
    assert error.message.startswith("Could not find")


@pytest.mark.parametrize("size", [0, 1, 0xFFFFFE, 0xFFFFFF, 0xFFFFFF + 1, 2 * 0xFFFFFF, 2 * 0xFFFFFF + 5])
def test_payloads_split_at_16_mib_are_joined(size: int) -> None:
    payload = (bytes(range(251)) * (size // 251 + 1))[:size]
    reader = reader_of(frame(payload, 1) + frame(b"next", 1 + size // 0xFFFFFF + 1))
    reader.reset(0)
    assert reader.read_payload() == payload
    assert reader.read_payload() == b"next"


def test_a_sequence_gap_means_lost_bytes() -> None:
    reader = reader_of(frame(b"a", 1) + frame(b"b", 3))
    reader.reset(0)
    reader.read_payload()
    with pytest.raises(ProtocolError, match="sequence 3 after 1"):
        reader.read_payload()


def test_a_restart_at_sequence_0_is_the_servers_shutdown() -> None:
    reader = reader_of(frame(b"a", 1) + frame(b"\xff\x35\x04shutdown", 0))
    reader.reset(0)
    reader.read_payload()
    with pytest.raises(SequenceRestartError):
        reader.read_payload()


def test_eof_packet() -> None:
    assert packets.is_eof(b"\xfe\x00\x00\x02\x00")
    assert not packets.is_eof(b"\x00\xfe")


def test_mariadb_gtid_state() -> None:
    state = MariadbGtidState.parse("1-2-30, 0-1-5")
    assert str(state) == "0-1-5,1-2-30"
    assert str(state.with_gtid("0-1-6").with_gtid("2-1-1")) == "0-1-6,1-2-30,2-1-1"
    for bad in ("0-1", "0-1-x", "0-1-1,0-2-2"):
        with pytest.raises(PositionError):
            MariadbGtidState.parse(bad)


def test_mysql_gtid_set_merges_and_prints() -> None:
    sid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    gtids = MysqlGtidSet.parse(f"{sid.upper()}:1-3:5")
    gtids = gtids.with_gtid(f"{sid}:4").with_gtid(f"{sid}:9")
    assert str(gtids) == f"{sid}:1-5:9"
    for bad in ("nope:1", f"{sid}", f"{sid}:0", f"{sid}:5-3"):
        with pytest.raises(PositionError):
            MysqlGtidSet.parse(bad)


def test_a_mysql_gtid_set_grows_by_each_gtid_as_a_union_would() -> None:
    """with_gtid's shortcut (the next number of a server's last interval) and its general merge
    give what a union with the one GTID gives, over random GTIDs of three servers and a tag."""
    rng = random.Random(5)
    sids = [f"{n:08x}-71ca-11e1-9e33-c80aa9429562" for n in (1, 2, 3)]
    gtids = MysqlGtidSet()
    for _ in range(2000):
        sid = rng.choice(sids)
        tag = rng.choice(["", "", "", "t:"])
        last = [b for (s, t), intervals in gtids.sets if s == sid and t == tag[:-1] for _, b in intervals[-1:]]
        gno = (last[0] + 1) if last and rng.random() < 0.8 else rng.randint(1, 60)
        gtid = f"{sid.upper() if rng.random() < 0.1 else sid}:{tag}{gno}"
        grown = gtids.with_gtid(gtid)
        assert grown == gtids.union(MysqlGtidSet.parse(gtid)), gtid
        gtids = grown
    assert len(gtids.sets) == 6


def test_binlog_files_sort_by_number() -> None:
    assert binlog_sort_key("bin.000009", 100) < binlog_sort_key("bin.000010", 4)
    assert binlog_sort_key("bin.999999", 4) < binlog_sort_key("bin.1000000", 4)
    assert Position("bin.000002", 4).sort_key() < Position("bin.000002", 5).sort_key()


TAGGED = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_tagged_gtid_sets_parse_print_and_contain() -> None:
    # MySQL 8.3+: `SET gtid_next = 'AUTOMATIC:batch_a'`; a tag applies to the numbers after it.
    gtids = MysqlGtidSet.parse(f"{TAGGED.upper()}:1-3:Batch_A:1-2:9,{TAGGED}:5")
    assert str(gtids) == f"{TAGGED}:1-3:5:batch_a:1-2:9"
    assert gtids.contains(f"{TAGGED}:batch_a:2") and gtids.contains(f"{TAGGED}:5")
    assert not gtids.contains(f"{TAGGED}:9") and not gtids.contains(f"{TAGGED}:batch_b:1")
    grown = gtids.with_gtid(f"{TAGGED}:batch_a:3").with_gtid(f"{TAGGED}:4")
    assert str(grown) == f"{TAGGED}:1-5:batch_a:1-3:9"
    assert str(MysqlGtidSet.parse(f"{TAGGED}:1").union(MysqlGtidSet.parse(f"{TAGGED}:t:2,{TAGGED}:2"))) == (
        f"{TAGGED}:1-2:t:2"
    )
    for bad in (f"{TAGGED}:batch_a", f"{TAGGED}:9tag:1", f"{TAGGED}:{'x' * 33}:1", f"{TAGGED}:t:0"):
        with pytest.raises(PositionError):
            MysqlGtidSet.parse(bad)


def test_tagged_gtid_sets_encode_as_the_server_writes_previous_gtids() -> None:
    # The tagged form of Gtid_set::encode: format byte 1 at both ends of the count, a tag per
    # entry; the decoder of PREVIOUS_GTIDS_LOG_EVENT (which the server writes in this form)
    # reads back what the dump command sends.
    gtids = MysqlGtidSet.parse(f"{TAGGED}:1-3:batch_a:7")
    data = gtids.encode()
    assert struct.unpack_from("<Q", data)[0] == (1 << 56) | (2 << 8) | 1
    event = decode_previous_gtids(Reader(data), EventHeader(0, 35, 1, 0, 0, 0))
    assert MysqlGtidSet.parse(event.gtid_set) == gtids
    untagged = MysqlGtidSet.parse(f"{TAGGED}:1-3")
    assert struct.unpack_from("<Q", untagged.encode())[0] == 1


def test_varlen_writes_what_the_reader_reads() -> None:
    for value in (0, 1, 31, 127, 128, 300, 1 << 20, (1 << 56) - 1, 1 << 56, (1 << 64) - 1):
        assert Reader(varlen(value)).varlen("value") == value


def test_mysql_gtid_set_subsets() -> None:
    big = MysqlGtidSet.parse(
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:tag_a:1-5,4e11fa47-71ca-11e1-9e33-c80aa9429562:7"
    )
    assert MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:3-9:50").issubset(big)
    assert MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_a:5").issubset(big)
    assert MysqlGtidSet().issubset(big)
    assert not MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:100-101").issubset(big)
    assert not MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_b:1").issubset(big)
    assert not MysqlGtidSet.parse("4e11fa47-71ca-11e1-9e33-c80aa9429562:6").issubset(big)


class _Socket:
    """A socket twin that hands out its bytes in reads of at most `chunk` bytes."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.chunk, self.at = data, chunk, 0

    def recv_into(self, view: memoryview) -> int:
        size = min(len(view), self.chunk, len(self.data) - self.at)
        view[:size] = self.data[self.at : self.at + size]
        self.at += size
        return size


def _packet(size: int, sequence: int) -> bytes:
    return size.to_bytes(3, "little") + bytes([sequence]) + bytes([sequence]) * size


def test_the_dump_buffer_grows_for_a_long_packet_and_shrinks_back_after_it() -> None:
    stream = _packet(10, 1) + _packet(3000, 2) + _packet(20, 3)
    buffer = DumpBuffer(_Socket(stream, 700), lambda: "test", size=256)  # type: ignore[arg-type]
    taken: list[tuple[int, int, bool]] = []
    while len(taken) < 3:
        unread = buffer.end - buffer.start
        length = int.from_bytes(buffer.data[buffer.start : buffer.start + 3], "little") if unread >= 4 else -1
        if 0 <= length <= unread - 4:  # a whole packet in place, as the kernel takes it
            body = bytes(buffer.data[buffer.start + 4 : buffer.start + 4 + length])
            taken.append((length, len(buffer.data), body == bytes([len(taken) + 1]) * length))
            buffer.advance(4 + length)
        else:
            assert buffer.fill()
    # the 3,000-byte packet was read whole into a buffer grown for it; the next one after the shrink
    assert taken == [(10, 256, True), (3000, 3004, True), (20, 256, True)]
    assert buffer.start == buffer.end


def test_the_dump_buffer_leaves_a_packet_continued_in_the_next_to_the_packet_reader() -> None:
    stream = _packet(packets.MAX_PACKET, 1)[:1000]
    buffer = DumpBuffer(_Socket(stream, 1000), lambda: "test", size=256)  # type: ignore[arg-type]
    assert buffer.fill() and buffer.end - buffer.start == 256
    assert not buffer.fill()  # the kernel never takes it whole: PacketReader reads it
    assert len(buffer.data) == 256
