#!/usr/bin/env bash
# `make run`: the connector on a demo database with a small live workload. MariaDB, Redis
# and Kafka are already up (make services). Sluice streams the changes into Kafka as Avro;
# `sluice consume` prints them back, decoded with schemas/ alone; `sluice status` shows the
# saved positions.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SLUICE="$ROOT/.venv/bin/sluice"
CONFIG="$ROOT/deploy/sluice.example.toml"
MYSQL=(mariadb -h127.0.0.1 -P"${SLUICE_MARIADB_PORT:-3306}" -uroot)
cd "$ROOT"

"${MYSQL[@]}" <<'SQL'
CREATE DATABASE IF NOT EXISTS sluice_demo;
CREATE TABLE IF NOT EXISTS sluice_demo.orders (
  id BIGINT UNSIGNED PRIMARY KEY AUTO_INCREMENT,
  customer VARCHAR(64) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  status ENUM('new','paid','shipped') NOT NULL DEFAULT 'new',
  placed_at DATETIME(6) NOT NULL,
  note JSON NULL
);
-- Rows that exist before the connector's first start: its initial snapshot publishes them as READ.
INSERT INTO sluice_demo.orders (customer, amount, placed_at, note)
  SELECT 'Before Sluice', 1.00, NOW(6), NULL FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM sluice_demo.orders);
SQL

# The demo starts at the server's current position every time (the binlogs of an earlier run
# may be purged by now, which a real connector reports and never skips). The first run's
# initial snapshot publishes the existing rows as READ; later runs ask for a re-snapshot.
if "$SLUICE" position show --config "$CONFIG" 2>/dev/null | grep -q ': [^N]'; then
  "$SLUICE" position reset --config "$CONFIG" >/dev/null
  "$SLUICE" snapshot --config "$CONFIG" --tables sluice_demo.orders
fi

"$SLUICE" run --config "$CONFIG" 2> .run/demo-connector.log &
CONNECTOR=$!
trap 'kill -TERM $CONNECTOR 2>/dev/null; wait $CONNECTOR 2>/dev/null || true' EXIT
sleep 4

echo "--- a live workload on sluice_demo.orders ---" >&2
for i in 1 2 3; do
  "${MYSQL[@]}" sluice_demo <<SQL
INSERT INTO orders (customer, amount, placed_at, note) VALUES
  ('Ada $i', 19.99, NOW(6), '{"gift": true}'), ('Grace $i', 250.00, NOW(6), NULL), ('Линус $i', 7.50, NOW(6), NULL);
UPDATE orders SET status = 'paid' WHERE customer = 'Ada $i';
DELETE FROM orders WHERE customer = 'Grace $i';
SQL
  sleep 1
done

echo "--- the topics, decoded with schemas/ ---" >&2
"$SLUICE" consume --config "$CONFIG" --idle-s 5 --max 1000
echo "--- positions ---" >&2
"$SLUICE" status --config "$CONFIG"
