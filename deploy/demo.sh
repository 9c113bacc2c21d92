#!/usr/bin/env bash
# `make run`: a small live workload on the local MariaDB, then its binlog decoded into
# canal-style flat messages, so a newcomer sees change data flow end to end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MYSQL=(mariadb -h127.0.0.1 -P"${SLUICE_MARIADB_PORT:-3306}" -uroot)

"${MYSQL[@]}" -e "FLUSH BINARY LOGS"
BINLOG_DIR="$ROOT/.run/mariadb/binlog"
FILE="$("${MYSQL[@]}" -N -e "SHOW MASTER STATUS" | cut -f1)"

"${MYSQL[@]}" <<'SQL'
CREATE DATABASE IF NOT EXISTS sluice_demo;
USE sluice_demo;
DROP TABLE IF EXISTS orders;
CREATE TABLE orders (
  id BIGINT UNSIGNED PRIMARY KEY AUTO_INCREMENT,
  customer VARCHAR(64) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  status ENUM('new','paid','shipped') NOT NULL DEFAULT 'new',
  placed_at DATETIME(6) NOT NULL,
  note JSON NULL
);
INSERT INTO orders (customer, amount, placed_at, note) VALUES
  ('Ada', 19.99, NOW(6), '{"gift": true}'),
  ('Grace', 250.00, NOW(6), NULL),
  ('Линус', 7.50, NOW(6), '{"tags": ["rush", "fragile"]}');
UPDATE orders SET status = 'paid' WHERE customer = 'Ada';
DELETE FROM orders WHERE customer = 'Grace';
SQL

echo "--- flat messages decoded from $FILE ---" >&2
"$ROOT/.venv/bin/sluice" decode "$BINLOG_DIR/$FILE"
