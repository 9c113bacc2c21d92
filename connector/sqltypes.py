"""canal's column types: `mysqlType` and `sqlType`, one rule for canal-json, `sluice decode` and `sluice tail`.

How canal computes them (read in canal.parse 1.1.7's sources, the newest canal.parse on Maven
Central, and canal.parse.dbsync 1.1.8's; the live test runs those classes, so a canal.parse 1.1.8
that differs from 1.1.7 here would go unseen):

mysqlType is canal's TableMeta field type (TableMeta.FieldMeta.columnType). TableMetaCache asks
the server `SHOW CREATE TABLE` (`DESC` if that fails) and MemoryTableMeta.processTableElement
(parse/inbound/mysql/tsdb/MemoryTableMeta.java) builds the text from druid's parse of it: the
type's name and arguments as the server printed them, then " unsigned" and " zerofill". So it
is the server's own spelling: MariaDB prints integer display widths (`int(11)`, `tinyint(3)
unsigned`) and `year(4)`; MySQL 8.0.19+ prints none, except `tinyint(1)` (signed) and the width
of a ZEROFILL column. `shown_width` is that rule; `mysql_type_of` the text of a tracked column.

sqlType is the java.sql.Types code of each value, decided in two steps:
1. RowsLogBuffer (dbsync/binlog/event/RowsLogBuffer.java) codes the value by its logged type:
   fetchValue for a value, mysqlToJavaType for a NULL. The two agree except for SET (a value
   BIT -7, a NULL BINARY -2) and MySQL's JSON (a value VARCHAR 12, a NULL OTHER 1111: no case).
   CHAR/VARCHAR columns whose type text contains "binary" (BINARY, VARBINARY) are byte strings.
2. LogEventConvert.parseOneRow (parse/inbound/mysql/dbsync/LogEventConvert.java) turns every
   byte-string code (BINARY, VARBINARY, LONGVARBINARY), for a value and for a NULL alike, into
   CLOB 2005 when the type text is exactly tinytext, text, mediumtext or longtext, else BLOB
   2004; and an integer whose type text says unsigned and whose value the signed read made
   negative (above the signed maximum) takes the next wider code: TINYINT -6 -> SMALLINT 5,
   SMALLINT 5 -> INTEGER 4, MEDIUMINT stays INTEGER 4, INTEGER 4 -> BIGINT -5, BIGINT -5 ->
   DECIMAL 3.

Per type, a value's code / a NULL's: tinyint -6, smallint 5, mediumint and int 4, bigint -5
(UNSIGNED above the signed range: the wider code); decimal 3; float 7; double 8; bit -7;
date 91; time 92; datetime and timestamp 93; year 12; char 1; varchar 12; binary, varbinary,
the blobs and the geometry types 2004; the texts (MariaDB's JSON is longtext) 2005; enum 4;
set -7 / 2004; MySQL's json 12 / 1111; MariaDB's uuid, inet4 and inet6 (logged as CHAR) 1;
vector 1111 (canal 1.1.8 cannot read its values: its decoder has no case for the type).

Everything here is a function of the type text alone, so a column's type as the binlog tells
it (`sluice decode` without a schema: connector/flat.py's `mysql_type`) and as the schema
history holds it go through the same rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from connector.schema.model import GEOMETRY_TYPES, Column

Text = str | None

# java.sql.Types
TINYINT, SMALLINT, INTEGER, BIGINT, DECIMAL, REAL, DOUBLE, BIT = -6, 5, 4, -5, 3, 7, 8, -7
CHAR, VARCHAR, DATE, TIME, TIMESTAMP, BLOB, CLOB, OTHER = 1, 12, 91, 92, 93, 2004, 2005, 1111


@dataclass(frozen=True, slots=True)
class CanalType:
    """canal's sqlType of one column: `value` for a value, `null` for a NULL, and `wider` for an
    UNSIGNED value above `limit` (the signed maximum)."""

    value: int
    null: int
    wider: int | None = None
    limit: int = 0

    def of(self, text: Text) -> int:
        """The code of a value given as its text (None: NULL)."""
        if text is None:
            return self.null
        if self.wider is not None and int(text) > self.limit:
            return self.wider
        return self.value


def _same(code: int) -> CanalType:
    return CanalType(code, code)


# Integers: (code, signed maximum, code of an UNSIGNED value above it).
_INTEGERS: dict[str, tuple[int, int, int]] = {
    "tinyint": (TINYINT, 127, SMALLINT), "smallint": (SMALLINT, 32767, INTEGER),
    "mediumint": (INTEGER, 8388607, INTEGER), "int": (INTEGER, 2147483647, BIGINT),
    "bigint": (BIGINT, 9223372036854775807, DECIMAL),
}  # fmt: skip
_TEXTS = frozenset({"tinytext", "text", "mediumtext", "longtext"})
_BY_NAME: dict[str, CanalType] = {
    "decimal": _same(DECIMAL), "float": _same(REAL), "double": _same(DOUBLE), "bit": _same(BIT),
    "date": _same(DATE), "time": _same(TIME), "datetime": _same(TIMESTAMP), "timestamp": _same(TIMESTAMP),
    "year": _same(VARCHAR), "char": _same(CHAR), "varchar": _same(VARCHAR), "enum": _same(INTEGER),
    "set": CanalType(BIT, BLOB), "json": CanalType(VARCHAR, OTHER),
    **dict.fromkeys(_TEXTS, _same(CLOB)),
    **dict.fromkeys(("uuid", "inet4", "inet6"), _same(CHAR)),  # MariaDB: logged as CHAR, no "binary" in the text
}  # fmt: skip
_NAME = re.compile(r"[a-z0-9_]*")


def canal_type(mysql_type: str) -> CanalType:
    """canal's sqlType rule for a column of this type text (its mysqlType)."""
    text = mysql_type.lower()
    name = _NAME.match(text).group(0)  # type: ignore[union-attr]  # matches the empty string at least
    if name in _INTEGERS:
        code, limit, wider = _INTEGERS[name]
        return CanalType(code, code, wider, limit) if "unsigned" in text else _same(code)
    if (name in ("char", "varchar") and "binary" in text) or name in ("binary", "varbinary"):
        return _same(BLOB)  # RowsLogBuffer's isBinary, then LogEventConvert's BLOB
    if name.endswith("blob") or name in GEOMETRY_TYPES:  # no name of _BY_NAME's
        return _same(BLOB)
    return _BY_NAME.get(name, _same(OTHER))  # OTHER: vector, and anything canal's decoder has no case for


# -- mysqlType ----------------------------------------------------------------------------------

# Display widths the servers print when none was declared: (signed, unsigned or ZEROFILL).
_DEFAULT_WIDTHS = {"tinyint": (4, 3), "smallint": (6, 5), "mediumint": (9, 8), "int": (11, 10), "bigint": (20, 20)}


def shown_width(name: str, declared: int | None, unsigned: bool, zerofill: bool, mariadb: bool) -> int | None:
    """The display width SHOW CREATE TABLE prints for a column of type `name`: MariaDB's always
    (the declared one, else the type's default; YEAR is year(4)); MySQL 8.0.19+ only a ZEROFILL
    column's and a signed TINYINT(1)'s (MySQL's WL#13528, kept for Connector/J's booleans).
    Both as MariaDB 10.11 and MySQL 9.7 print them. None: none printed."""
    if name == "year":
        return 4 if mariadb else None
    defaults = _DEFAULT_WIDTHS.get(name)
    if defaults is None:
        return None
    if mariadb or zerofill:
        return declared or defaults[unsigned or zerofill]
    return 1 if name == "tinyint" and declared == 1 and not unsigned else None


def mysql_type_of(col: Column) -> str:
    """The column's type as the server prints it in SHOW CREATE TABLE (lowercase), canal's mysqlType."""
    text = col.sql_type()
    if col.display_width is not None and not col.params:
        text = f"{col.data_type}({col.display_width})" + (" unsigned" if col.unsigned else "")
    return text + (" zerofill" if col.zerofill else "")
