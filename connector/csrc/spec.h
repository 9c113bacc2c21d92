/* Written by connector/native_spec.py (python -m connector.native_spec): do not edit. */
#ifndef SLUICE_SPEC_H
#define SLUICE_SPEC_H
#include <stdint.h>

enum {
    OP_INT = 1,
    OP_UINT = 2,
    OP_UINT64 = 3,
    OP_FLOAT = 4,
    OP_DOUBLE = 5,
    OP_DECIMAL = 6,
    OP_DATE = 7,
    OP_DATETIME2 = 8,
    OP_TIMESTAMP2 = 9,
    OP_YEAR = 10,
    OP_UTF8 = 11,
    OP_BYTES = 12,
    OP_TIME2 = 13,
    OP_BIT = 14,
    OP_BIT64 = 15,
    OP_ENUM = 16,
    OP_SET = 17,
    OP_TEXT8 = 18,
    OP_JSON = 19,
    OP_TEXTMB = 20,
    OP_WIDE = 21,
    OP_GEOMETRY = 22,
    OP_VECTOR = 23,
};
enum {
    WIDE_UTF16 = 0,
    WIDE_UTF16LE = 1,
    WIDE_UTF32 = 2,
    WIDE_UCS2 = 3,
};
enum {
    COL_ASCII = 1,
    COL_DROP = 2,
    COL_MASK = 4,
    COL_HASH = 8,
};
enum {
    WALK_BYTES = 0,
    WALK_UTF8 = 1,
    WALK_JSON = 2,
    WALK_CODES = 3,
    WALK_WIDE = 4,
    WALK_FLOATS = 5,
};
enum {
    KIND_WRITE = 0,
    KIND_UPDATE = 1,
    KIND_DELETE = 2,
};
enum {
    STOP_NEED_BYTES = 0,
    STOP_CONTROL = 1,
    STOP_FULL = 2,
    STOP_UNTAUGHT = 3,
};
enum {
    QUERY_EVENT = 2,
    XID_EVENT = 16,
    TABLE_MAP_EVENT = 19,
    ROWS_QUERY_LOG_EVENT = 29,
    WRITE_ROWS_EVENT_V1 = 23,
    UPDATE_ROWS_EVENT_V1 = 24,
    DELETE_ROWS_EVENT_V1 = 25,
    WRITE_ROWS_EVENT = 30,
    UPDATE_ROWS_EVENT = 31,
    DELETE_ROWS_EVENT = 32,
    GTID_LOG_EVENT = 33,
    ANONYMOUS_GTID_LOG_EVENT = 34,
    ANNOTATE_ROWS_EVENT = 160,
    GTID_EVENT = 162,
    TRANSACTION_PAYLOAD_EVENT = 40,
};
#define LOG_EVENT_HEADER_LEN 0x13u
#define BINLOG_CHECKSUM_LEN 0x4u
#define FL_STANDALONE 0x1u
#define FL_GROUP_COMMIT_ID 0x2u
#define FL_PREPARED_XA 0x40u
#define FL_COMPLETED_XA 0x80u
#define MAX_PACKET 0xffffffu
#define CRC32_RESIDUE 0x2144df1cu
#define MURMUR2_SEED 0x9747b28cu
#define MURMUR2_M 0x5bd1e995u
#define OTW_PAYLOAD_HEADER_END_MARK 0x0u
#define OTW_PAYLOAD_SIZE_FIELD 0x1u
#define OTW_PAYLOAD_COMPRESSION_TYPE_FIELD 0x2u
#define OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD 0x3u
#define PAYLOAD_COMPRESSION_ZSTD 0x0u
#define PAYLOAD_COMPRESSION_NONE 0xffu
#define MAX_PAYLOAD_UNCOMPRESSED 0x40000000u
#define MAX_COLUMNS 0x1000u
#define MAX_DECIMAL_DIGITS 0x41u
#define CODE_TABLE_COUNT 0xbu
#define WIDE_FORM_COUNT 0x4u
#define CODE_CHILD 0x80000000u
#define CODE_TEXT_SHIFT 0x4u
#define CODE_TEXT_LENGTH 0xfu
#define CODE_RANGE 0x40000000u
#define CODE_RANGE_WIDTHS 0x4u
#define CODE_RANGE_NO_TEXT 0xffffffffu
#define COL_STRING_SHIFT 0x8u
typedef struct { int32_t op, width, a, b, null_branch, value_branch, flags; } column_t;
typedef struct { int32_t column, null_branch, value_branch; } key_t_;
typedef struct { int32_t width, prefix, check, table; } walk_t;
typedef struct { int32_t value, null, wider; } sqltype_t;
enum {
    PLAN_COLUMNS,
    PLAN_KEYS,
    PLAN_STRINGS,
    PLAN_VALUE_PREFIX,
    PLAN_KEY_PREFIX,
    PLAN_HEADS,
    PLAN_DATA_OPEN,
    PLAN_OLD_NULL,
    PLAN_OLD_OPEN,
    PLAN_PARTITIONS,
    PLAN_FIXED,
    PLAN_KEY_SKIP,
    PLAN_KINDS,
    PLAN_LIMIT,
    PLAN_CANAL,
    PLAN_FIELD_COUNT
};
#define PLAN_FIELD_NAMES "columns", "keys", "strings", "value_prefix", "key_prefix", "heads", "data_open", "old_null", "old_open", "partitions", "fixed", "key_skip", "kinds", "limit", "canal"
enum {
    CANAL_NAMES,
    CANAL_TYPES,
    CANAL_FULL_OLD,
    CANAL_PER_EVENT,
    CANAL_DATABASE,
    CANAL_MYSQL,
    CANAL_PK,
    CANAL_TABLE,
    CANAL_KINDS,
    CANAL_FIELD_COUNT
};
#define CANAL_FIELD_NAMES "names", "types", "full_old", "per_event", "database", "mysql", "pk", "table", "kinds"
enum {
    RUN_CONSUMED,
    RUN_REASON,
    RUN_SEQUENCE,
    RUN_TOPICS,
    RUN_COUNTS,
    RUN_BYTES,
    RUN_COMMITS,
    RUN_COMMIT,
    RUN_GTIDS,
    RUN_LAST_EVENT,
    RUN_TRANSACTION,
    RUN_PARTS,
    RUN_FIELD_COUNT
};
#define RUN_FIELD_NAMES "consumed", "reason", "sequence", "topics", "counts", "bytes", "commits", "commit", "gtids", "last_event", "transaction", "parts"
enum {
    TRANSACTION_IN_TXN,
    TRANSACTION_BEGAN,
    TRANSACTION_GTID,
    TRANSACTION_ROWS,
    TRANSACTION_START,
    TRANSACTION_HANDED,
    TRANSACTION_SQL,
    TRANSACTION_FIELD_COUNT
};
#define TRANSACTION_FIELD_NAMES "in_txn", "began", "gtid", "rows", "start", "handed", "sql"
static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

#endif
