"""Binlog constants under MySQL's and MariaDB's own names.

Names follow `libs/mysql/binlog/event/binlog_event.h` (MySQL) and `sql/log_event.h`
(MariaDB) so that a reader can grep the server sources for them.
"""

from __future__ import annotations

from enum import IntEnum

BINLOG_MAGIC = b"\xfebin"
LOG_EVENT_HEADER_LEN = 19
BINLOG_CHECKSUM_LEN = 4

# Event header flags (binlog_event.h).
LOG_EVENT_BINLOG_IN_USE_F = 0x0001
LOG_EVENT_ARTIFICIAL_F = 0x0020
LOG_EVENT_IGNORABLE_F = 0x0080

# FORMAT_DESCRIPTION checksum algorithm byte.
BINLOG_CHECKSUM_ALG_OFF = 0
BINLOG_CHECKSUM_ALG_CRC32 = 1
BINLOG_CHECKSUM_ALG_UNDEF = 255

# Rows event flags.
STMT_END_F = 0x0001

# binlog_row_value_options bit carried by PARTIAL_UPDATE_ROWS_EVENT after images.
PARTIAL_JSON_UPDATES = 1


class EventType(IntEnum):
    UNKNOWN_EVENT = 0
    START_EVENT_V3 = 1
    QUERY_EVENT = 2
    STOP_EVENT = 3
    ROTATE_EVENT = 4
    INTVAR_EVENT = 5
    LOAD_EVENT = 6
    SLAVE_EVENT = 7
    CREATE_FILE_EVENT = 8
    APPEND_BLOCK_EVENT = 9
    EXEC_LOAD_EVENT = 10
    DELETE_FILE_EVENT = 11
    NEW_LOAD_EVENT = 12
    RAND_EVENT = 13
    USER_VAR_EVENT = 14
    FORMAT_DESCRIPTION_EVENT = 15
    XID_EVENT = 16
    BEGIN_LOAD_QUERY_EVENT = 17
    EXECUTE_LOAD_QUERY_EVENT = 18
    TABLE_MAP_EVENT = 19
    PRE_GA_WRITE_ROWS_EVENT = 20
    PRE_GA_UPDATE_ROWS_EVENT = 21
    PRE_GA_DELETE_ROWS_EVENT = 22
    WRITE_ROWS_EVENT_V1 = 23
    UPDATE_ROWS_EVENT_V1 = 24
    DELETE_ROWS_EVENT_V1 = 25
    INCIDENT_EVENT = 26
    HEARTBEAT_LOG_EVENT = 27
    IGNORABLE_LOG_EVENT = 28
    ROWS_QUERY_LOG_EVENT = 29
    WRITE_ROWS_EVENT = 30
    UPDATE_ROWS_EVENT = 31
    DELETE_ROWS_EVENT = 32
    GTID_LOG_EVENT = 33
    ANONYMOUS_GTID_LOG_EVENT = 34
    PREVIOUS_GTIDS_LOG_EVENT = 35
    TRANSACTION_CONTEXT_EVENT = 36
    VIEW_CHANGE_EVENT = 37
    XA_PREPARE_LOG_EVENT = 38
    PARTIAL_UPDATE_ROWS_EVENT = 39
    TRANSACTION_PAYLOAD_EVENT = 40
    HEARTBEAT_LOG_EVENT_V2 = 41
    GTID_TAGGED_LOG_EVENT = 42
    # MariaDB (sql/log_event.h); 160 and up.
    ANNOTATE_ROWS_EVENT = 160
    BINLOG_CHECKPOINT_EVENT = 161
    GTID_EVENT = 162
    GTID_LIST_EVENT = 163
    START_ENCRYPTION_EVENT = 164
    QUERY_COMPRESSED_EVENT = 165
    WRITE_ROWS_COMPRESSED_EVENT_V1 = 166
    UPDATE_ROWS_COMPRESSED_EVENT_V1 = 167
    DELETE_ROWS_COMPRESSED_EVENT_V1 = 168
    WRITE_ROWS_COMPRESSED_EVENT = 169
    UPDATE_ROWS_COMPRESSED_EVENT = 170
    DELETE_ROWS_COMPRESSED_EVENT = 171


def event_type_name(code: int) -> str:
    """Name of an event type code, or `TYPE_<n>` for a code neither server defines."""
    try:
        return EventType(code).name
    except ValueError:
        return f"TYPE_{code}"


class RowsKind(IntEnum):
    """The three row operations a rows event can carry."""

    WRITE = 1
    UPDATE = 2
    DELETE = 3


class ColumnType(IntEnum):
    """enum_field_types from include/field_types.h."""

    MYSQL_TYPE_DECIMAL = 0
    MYSQL_TYPE_TINY = 1
    MYSQL_TYPE_SHORT = 2
    MYSQL_TYPE_LONG = 3
    MYSQL_TYPE_FLOAT = 4
    MYSQL_TYPE_DOUBLE = 5
    MYSQL_TYPE_NULL = 6
    MYSQL_TYPE_TIMESTAMP = 7
    MYSQL_TYPE_LONGLONG = 8
    MYSQL_TYPE_INT24 = 9
    MYSQL_TYPE_DATE = 10
    MYSQL_TYPE_TIME = 11
    MYSQL_TYPE_DATETIME = 12
    MYSQL_TYPE_YEAR = 13
    MYSQL_TYPE_NEWDATE = 14
    MYSQL_TYPE_VARCHAR = 15
    MYSQL_TYPE_BIT = 16
    MYSQL_TYPE_TIMESTAMP2 = 17
    MYSQL_TYPE_DATETIME2 = 18
    MYSQL_TYPE_TIME2 = 19
    MYSQL_TYPE_TYPED_ARRAY = 20  # 8.0.18 and later; 244 in 8.0.17
    # MariaDB's COMPRESSED columns, only ever in TABLE_MAPs (include/mysql_com.h there):
    # a BLOB or VARCHAR whose values are compressed (sql/field_comp.cc).
    MYSQL_TYPE_BLOB_COMPRESSED = 140
    MYSQL_TYPE_VARCHAR_COMPRESSED = 141
    MYSQL_TYPE_VECTOR = 242
    MYSQL_TYPE_INVALID = 243
    MYSQL_TYPE_BOOL = 244  # 8.0.17 wrote MYSQL_TYPE_TYPED_ARRAY under this code
    MYSQL_TYPE_JSON = 245
    MYSQL_TYPE_NEWDECIMAL = 246
    MYSQL_TYPE_ENUM = 247
    MYSQL_TYPE_SET = 248
    MYSQL_TYPE_TINY_BLOB = 249
    MYSQL_TYPE_MEDIUM_BLOB = 250
    MYSQL_TYPE_LONG_BLOB = 251
    MYSQL_TYPE_BLOB = 252
    MYSQL_TYPE_VAR_STRING = 253
    MYSQL_TYPE_STRING = 254
    MYSQL_TYPE_GEOMETRY = 255


# 8.0.17 logged typed arrays as 244; 8.0.18 renumbered them to 20 (mysql bug 96444 era).
TYPED_ARRAY_CODES = frozenset({ColumnType.MYSQL_TYPE_TYPED_ARRAY, ColumnType.MYSQL_TYPE_BOOL})


class OptionalMetadataType(IntEnum):
    """Optional_metadata_field_type from libs/mysql/binlog/event/rows_event.h."""

    SIGNEDNESS = 1
    DEFAULT_CHARSET = 2
    COLUMN_CHARSET = 3
    COLUMN_NAME = 4
    SET_STR_VALUE = 5
    ENUM_STR_VALUE = 6
    GEOMETRY_TYPE = 7
    SIMPLE_PRIMARY_KEY = 8
    PRIMARY_KEY_WITH_PREFIX = 9
    ENUM_AND_SET_DEFAULT_CHARSET = 10
    ENUM_AND_SET_COLUMN_CHARSET = 11
    COLUMN_VISIBILITY = 12
    VECTOR_DIMENSIONALITY = 13


# Types whose SIGNEDNESS bit is logged (Table_map_log_event::is_numeric_type).
NUMERIC_TYPES = frozenset(
    {
        ColumnType.MYSQL_TYPE_TINY,
        ColumnType.MYSQL_TYPE_SHORT,
        ColumnType.MYSQL_TYPE_INT24,
        ColumnType.MYSQL_TYPE_LONG,
        ColumnType.MYSQL_TYPE_LONGLONG,
        ColumnType.MYSQL_TYPE_NEWDECIMAL,
        ColumnType.MYSQL_TYPE_FLOAT,
        ColumnType.MYSQL_TYPE_DOUBLE,
        ColumnType.MYSQL_TYPE_DECIMAL,
    }
)

# Types that carry a character set in optional metadata (COLUMN_CHARSET / DEFAULT_CHARSET),
# judged on the real type, so ENUM and SET are excluded here. The servers differ, as seen in
# their TABLE_MAPs of one table (GEOMETRY, POINT, VECTOR beside text columns): MySQL counts
# VECTOR (a blob underneath, collation 63) and not GEOMETRY (is_character_type in
# libs/mysql/binlog/event/rows_event.h; `mysqlbinlog --print-table-metadata` agrees);
# MariaDB counts GEOMETRY (Field_geom is a Field_blob there, logged as binary) and has no
# VECTOR type in the versions that log this metadata.
CHARACTER_TYPES = frozenset(
    {
        ColumnType.MYSQL_TYPE_STRING,
        ColumnType.MYSQL_TYPE_VAR_STRING,
        ColumnType.MYSQL_TYPE_VARCHAR,
        ColumnType.MYSQL_TYPE_BLOB,
        ColumnType.MYSQL_TYPE_TINY_BLOB,
        ColumnType.MYSQL_TYPE_MEDIUM_BLOB,
        ColumnType.MYSQL_TYPE_LONG_BLOB,
        ColumnType.MYSQL_TYPE_VECTOR,
    }
)
MARIADB_CHARACTER_TYPES = (CHARACTER_TYPES - {ColumnType.MYSQL_TYPE_VECTOR}) | {ColumnType.MYSQL_TYPE_GEOMETRY}

ENUM_SET_TYPES = frozenset({ColumnType.MYSQL_TYPE_ENUM, ColumnType.MYSQL_TYPE_SET})

# QUERY_EVENT status variable codes (Query_event::Query_event_status_vars).
Q_FLAGS2_CODE = 0
Q_SQL_MODE_CODE = 1
Q_CATALOG_CODE = 2
Q_AUTO_INCREMENT = 3
Q_CHARSET_CODE = 4
Q_TIME_ZONE_CODE = 5
Q_CATALOG_NZ_CODE = 6
Q_LC_TIME_NAMES_CODE = 7
Q_CHARSET_DATABASE_CODE = 8
Q_TABLE_MAP_FOR_UPDATE_CODE = 9
Q_MASTER_DATA_WRITTEN_CODE = 10
Q_INVOKER = 11
Q_UPDATED_DB_NAMES = 12
Q_MICROSECONDS = 13
Q_COMMIT_TS = 14
Q_COMMIT_TS2 = 15
Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP = 16
Q_DDL_LOGGED_WITH_XID = 17
Q_DEFAULT_COLLATION_FOR_UTF8MB4 = 18
Q_SQL_REQUIRE_PRIMARY_KEY = 19
Q_DEFAULT_TABLE_ENCRYPTION = 20
Q_HRNOW = 128  # MariaDB
Q_XID = 129  # MariaDB
Q_GTID_FLAGS3 = 130  # MariaDB

# Q_UPDATED_DB_NAMES count meaning "too many databases to list".
OVER_MAX_DBS_IN_EVENT_MTS = 254

# TRANSACTION_PAYLOAD_EVENT header fields (Transaction_payload_event).
OTW_PAYLOAD_HEADER_END_MARK = 0
OTW_PAYLOAD_SIZE_FIELD = 1
OTW_PAYLOAD_COMPRESSION_TYPE_FIELD = 2
OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD = 3
PAYLOAD_COMPRESSION_ZSTD = 0
PAYLOAD_COMPRESSION_NONE = 255
# Largest TRANSACTION_PAYLOAD inflated: the server's own cap is max_allowed_packet (1 GiB).
MAX_PAYLOAD_UNCOMPRESSED = 1 << 30
# A table has at most 4096 columns (InnoDB: 1017): a rows event's count above it is corrupt.
MAX_COLUMNS = 4096

# HEARTBEAT_LOG_EVENT_V2 fields.
OTW_HB_HEADER_END_MARK = 0
OTW_HB_LOG_FILENAME_FIELD = 1
OTW_HB_LOG_POSITION_FIELD = 2

# MariaDB GTID_EVENT flags (Gtid_log_event).
FL_STANDALONE = 1
FL_GROUP_COMMIT_ID = 2
FL_TRANSACTIONAL = 4
FL_ALLOW_PARALLEL = 8
FL_WAITED = 16
FL_DDL = 32
FL_PREPARED_XA = 64
FL_COMPLETED_XA = 128
