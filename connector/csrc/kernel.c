/* The kernel: a run of the binlog dump's packets -> Kafka-ready messages, with no Python per event.
 *
 * connector/lane.py drives it. A run walks the dump's packets in a buffer (framing, sequence
 * numbers, the event header, the CRC-32), and handles what most of a binlog is: GTID events,
 * BEGIN, TABLE_MAPs it was taught, rows events of those tables (written straight to Avro keys and
 * values by rowimage.c, each given its partition), ROWS_QUERY/ANNOTATE_ROWS (skipped, or the
 * statement text the next rows event's first row carries), and XID commits, with the transaction's
 * state and the GTIDs it committed; and MySQL's compressed transactions (TRANSACTION_PAYLOAD: the
 * same events inside, taken all or none). It stops at the first packet it does not handle exactly
 * as the Python path would (STOP_CONTROL: a DDL, a ROTATE, a value the transcoder declines, an
 * error packet, any malformed byte), before taking anything of it; Python then reads that packet
 * itself.
 *
 * What it knows, Python taught it with bytes Python had decoded itself: a TABLE_MAP's body and
 * the plan for its rows (or that its table is not captured), and the exact status variables and
 * schema of a BEGIN. An event whose bytes match is decoded as Python decoded it; a BEGIN or
 * TABLE_MAP it was not taught stops the run too (STOP_UNTAUGHT), for Python to decode and teach
 * it before the kernel goes on; anything else is Python's. So the kernel cannot decode anything
 * differently from the Python path; it can only decline, and tests/test_lane.py and the fuzzer
 * (tests/fuzz/) hold it to that.
 *
 * Every loop moves on: packets by their length (at least the OK byte and a 19-byte header), a
 * payload's events by theirs (at least a header), its header fields by at least two bytes, rows
 * by at least their null bitmap (rowimage.c).
 */
#include "native.h"

#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>

enum { TABLE_PYTHON = 0, TABLE_SKIP = 1, TABLE_PLAN = 2 };
#define MAX_BEGINS 16    /* BEGIN shapes kept: one per connection's settings, recycled in turn */
#define GTID_TEXT 128

typedef struct {
    column_t *cols;
    Py_ssize_t ncols;
    key_t_ *keys;
    Py_ssize_t nkeys;
    buf_t strings_blob; /* the program's strings, read through `strings` */
    strings_t strings;
    buf_t value_prefix, key_prefix, heads[3], data_open, old_null, old_open;
    int32_t topic, metric, partitions, fixed, key_skip, kinds;
    Py_ssize_t limit; /* key + value bytes a message may have */
    /* canal-json's rows instead of Avro's (canal_rows): each column's JSON key and sqlType codes, the
     * table's parts of a message around what the event gives (canal_parts) */
    int canal, full_old, per_event;
    buf_t names_blob, types;
    strings_t names;
    buf_t c_database, c_mysql, c_pk, c_table, c_kinds[3];
} plan_t;

typedef struct {
    uint64_t table_id;
    int used, state;
    unsigned char *body; /* the TABLE_MAP's body, as Python decoded it */
    Py_ssize_t body_len;
    plan_t *plan;
} table_t;

typedef struct {
    out_t *items;
    Py_ssize_t len, cap;
    int32_t partitions; /* the most any of its plans has */
} topic_out_t;

typedef struct {
    unsigned char sid[16];
    uint64_t first, last;
} run_t; /* MySQL: consecutive numbers of one server UUID, committed in order */

typedef struct {
    uint32_t domain, server;
    uint64_t seq;
} domain_t; /* MariaDB: the last GTID committed in a domain */

enum { UNDO_OUT, UNDO_ROWS, UNDO_PART };
typedef struct {
    int what; /* UNDO_OUT: `n` messages at the end of topic `at`; UNDO_ROWS: `n` in row_counts[at]; UNDO_PART:
                 `n` in part_counts[at] */
    Py_ssize_t at;
    long long n;
} undo_t; /* what an event inside a TRANSACTION_PAYLOAD added to the run's output */

/* Transaction records: one transaction's part of a run's messages (connector/extras.TransactionTopic). */
typedef struct {
    long long first;     /* the position of the transaction's first rows event that made messages */
    Py_ssize_t counts;   /* its first (metric, messages) entry in part_counts; its last is before the next part's */
    int committed;       /* its XID was in this run */
    int has_gtid, gtid_len;
    char gtid[GTID_TEXT];
} part_t;

typedef struct {
    Py_ssize_t metric;
    long long n;
} part_count_t;

typedef struct {
    PyObject_HEAD
    /* the source */
    int configured, checksum, mariadb;
    int query_max; /* the most bytes of a statement's text a row message's `sql` carries; 0: none wanted */
    buf_t mark_before, mark_after; /* what a cut text ends in, around its size (QueryText.mark) */
    int table_map_post, rows_v1_post, rows_v2_post, query_post;
    buf_t file;            /* the binlog file's name as an Avro string (its length, then UTF-8) */
    long long file_number; /* its numeric extension: message ids are number << 32 | pos */
    /* what Python taught it */
    table_t *tables;
    Py_ssize_t tables_cap, tables_len;
    buf_t begins[MAX_BEGINS], keeps[MAX_BEGINS]; /* keeps: 0xFF where a BEGIN must match the shape */
    int nbegins, next_begin;
    /* the open transaction */
    int in_txn, began, has_gtid, gtid_len;
    char gtid[GTID_TEXT];
    unsigned char pending_sid[16];
    uint64_t pending_gno;
    uint32_t pending_domain, pending_server;
    long long txn_rows, txn_start, handed;
    long long txn_first; /* its first rows event that made messages, once txn_rows > 0 */
    buf_t sql; /* the statement text (ROWS_QUERY / ANNOTATE_ROWS, cut) the next rows event's first row carries */
    /* a run's output */
    topic_out_t *outs;
    Py_ssize_t nouts, out_total; /* out_total: messages in outs */
    out_t *event_outs; /* one rows event's messages, until the whole event is taken */
    Py_ssize_t event_len, event_cap;
    long long *row_counts; /* metric * 3 + kind */
    Py_ssize_t nrow_counts;
    long long event_counts[256];
    long long bytes, commits;
    long long commit_pos, commit_server, timestamp, last_ts, last_pos;
    run_t *runs;
    Py_ssize_t nruns, runs_cap;
    domain_t domains[64];
    int ndomains;
    /* compressed transactions */
    PyObject *inflate; /* the parser's zstd decompressor: (body, uncompressed size) -> bytes */
    void *dctx;        /* libzstd's decompression context, when the system has libzstd (zstd_lib) */
    int native_inflate; /* libzstd may inflate (inflater's native) */
    int staging;       /* inside a TRANSACTION_PAYLOAD: what its events add is noted, to be undone */
    long long payload_rows; /* txn_rows where the payload began: its rows are numbered from there */
    undo_t *undo;
    Py_ssize_t nundo, undo_cap;
    /* transaction records: each transaction's part of the run, when asked for (records()) */
    int records, part_open; /* part_open: the last part is the open transaction's */
    part_t *parts;
    Py_ssize_t nparts, parts_cap;
    part_count_t *part_counts;
    Py_ssize_t npart_counts, part_counts_cap;
} Kernel;

/* -- taught: tables and BEGINs ---------------------------------------------------------------- */

static void plan_free(plan_t *p) {
    if (p == NULL)
        return;
    PyMem_Free(p->cols);
    PyMem_Free(p->keys);
    buf_t *bufs[] = {&p->strings_blob, &p->value_prefix, &p->key_prefix, &p->heads[0], &p->heads[1],
                     &p->heads[2], &p->data_open, &p->old_null, &p->old_open, &p->names_blob, &p->types,
                     &p->c_database, &p->c_mysql, &p->c_pk, &p->c_table, &p->c_kinds[0], &p->c_kinds[1],
                     &p->c_kinds[2]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        PyMem_Free(bufs[i]->data);
    PyMem_Free(p);
}

static void tables_clear(Kernel *k) {
    for (Py_ssize_t i = 0; i < k->tables_cap; i++) {
        if (k->tables[i].used) {
            PyMem_Free(k->tables[i].body);
            plan_free(k->tables[i].plan);
        }
    }
    PyMem_Free(k->tables);
    k->tables = NULL;
    k->tables_cap = k->tables_len = 0;
}

static table_t *table_find(const Kernel *k, uint64_t id) {
    if (k->tables_cap == 0)
        return NULL;
    Py_ssize_t mask = k->tables_cap - 1, i = (Py_ssize_t)(id * 0x9E3779B97F4A7C15ull >> 40) & mask;
    for (Py_ssize_t probes = 0; probes < k->tables_cap; probes++, i = (i + 1) & mask) {
        if (!k->tables[i].used)
            return NULL;
        if (k->tables[i].table_id == id)
            return &k->tables[i];
    }
    return NULL;
}

/* A free slot for an id not in the table, which has room. */
static table_t *table_free_slot(Kernel *k, uint64_t id) {
    Py_ssize_t mask = k->tables_cap - 1, i = (Py_ssize_t)(id * 0x9E3779B97F4A7C15ull >> 40) & mask;
    while (k->tables[i].used)
        i = (i + 1) & mask;
    k->tables_len++;
    return &k->tables[i];
}

/* The slot for id: its own, or a free one (the table grows to stay at most half full). */
static table_t *table_slot(Kernel *k, uint64_t id) {
    table_t *found = table_find(k, id);
    if (found != NULL)
        return found;
    if (2 * (k->tables_len + 1) > k->tables_cap) {
        Py_ssize_t cap = k->tables_cap ? 2 * k->tables_cap : 16, old_cap = k->tables_cap;
        table_t *old = k->tables, *grown = PyMem_Calloc((size_t)cap, sizeof(table_t));
        if (grown == NULL)
            return (table_t *)PyErr_NoMemory();
        k->tables = grown;
        k->tables_cap = cap;
        k->tables_len = 0;
        for (Py_ssize_t i = 0; i < old_cap; i++)
            if (old[i].used)
                *table_free_slot(k, old[i].table_id) = old[i];
        PyMem_Free(old);
    }
    table_t *slot = table_free_slot(k, id);
    *slot = (table_t){.table_id = id, .used = 1};
    return slot;
}

static int copy_bytes(buf_t *b, PyObject *o) {
    if (!PyBytes_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "a plan's parts are bytes");
        return -1;
    }
    b->len = 0;
    return buf_put(b, PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o));
}

/* -- a plan, read by its attributes' names (native_spec.BOUNDARY) ----------------------------- */

static const char *const PLAN_ATTRS[PLAN_FIELD_COUNT] = {PLAN_FIELD_NAMES};
static const char *const CANAL_ATTRS[CANAL_FIELD_COUNT] = {CANAL_FIELD_NAMES};

/* o's attributes `names`, new references into out; 0 with the Python error when one is missing. */
static int attrs_of(PyObject *o, const char *const *names, int n, PyObject **out) {
    for (int i = 0; i < n; i++)
        if ((out[i] = PyObject_GetAttrString(o, names[i])) == NULL) {
            while (i--)
                Py_DECREF(out[i]);
            return 0;
        }
    return 1;
}

static void attrs_free(PyObject **a, int n) {
    for (int i = 0; i < n; i++)
        Py_DECREF(a[i]);
}

/* An int attribute within [lo, hi]; 0 with a ValueError (or the TypeError of a non-int) otherwise. */
static int int_in(PyObject *o, const char *name, long long lo, long long hi, long long *out) {
    *out = PyLong_AsLongLong(o);
    if (*out == -1 && PyErr_Occurred())
        return 0;
    if (*out < lo || *out > hi) {
        PyErr_Format(PyExc_ValueError, "malformed kernel plan: %s %lld", name, *out);
        return 0;
    }
    return 1;
}

/* Three bytes attributes (a plan's heads, canal-json's kinds) into into[0..2]. */
static int copy_three(buf_t *into, PyObject *o, const char *name) {
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 3) {
        PyErr_Format(PyExc_TypeError, "a kernel plan's %s are a tuple of three bytes", name);
        return 0;
    }
    for (int i = 0; i < 3; i++)
        if (copy_bytes(&into[i], PyTuple_GET_ITEM(o, i)) < 0)
            return 0;
    return 1;
}

/* A plan's canal-json parts (connector/native.CanalParts, made by connector/canal.py): names,
 * sqlTypes and whether `old` is whole, then the table's parts of a message, into p. 0: refused (a
 * Python error set). Checked as canal_json's are (canal_ok). */
static int canal_from(PyObject *o, plan_t *p) {
    PyObject *a[CANAL_FIELD_COUNT];
    if (!attrs_of(o, CANAL_ATTRS, CANAL_FIELD_COUNT, a))
        return 0;
    int full_old = PyObject_IsTrue(a[CANAL_FULL_OLD]), per_event = PyObject_IsTrue(a[CANAL_PER_EVENT]);
    PyObject *parts[] = {a[CANAL_NAMES], a[CANAL_TYPES], a[CANAL_DATABASE], a[CANAL_MYSQL], a[CANAL_PK],
                         a[CANAL_TABLE]};
    buf_t *into[] = {&p->names_blob, &p->types, &p->c_database, &p->c_mysql, &p->c_pk, &p->c_table};
    int ok = full_old >= 0 && per_event >= 0 && copy_three(p->c_kinds, a[CANAL_KINDS], "canal-json kinds");
    for (size_t i = 0; ok && i < sizeof parts / sizeof parts[0]; i++)
        ok = copy_bytes(into[i], parts[i]) == 0;
    attrs_free(a, CANAL_FIELD_COUNT);
    if (!ok)
        return 0;
    if (!strings_of((const unsigned char *)p->names_blob.data, p->names_blob.len, &p->names) ||
        !canal_ok(p->cols, p->ncols, &p->names, (const sqltype_t *)p->types.data, p->types.len)) {
        PyErr_SetString(PyExc_ValueError, "malformed canal-json kernel parts");
        return 0;
    }
    p->canal = 1, p->full_old = full_old, p->per_event = per_event;
    return 1;
}

/* A plan (connector/lane.KernelPlan), checked as the transcoder checks a program: every column
 * walkable, every key column inside the row, partitions sane. topic, metric: the lane's numbers of
 * its topic and table, which a run's results name them by. */
static plan_t *plan_read(PyObject *a[PLAN_FIELD_COUNT], int topic, int metric) {
    PyObject *cols = a[PLAN_COLUMNS], *keys = a[PLAN_KEYS], *strings = a[PLAN_STRINGS], *canal = a[PLAN_CANAL];
    long long partitions, fixed, skip, kinds, limit;
    if (!PyBytes_Check(cols) || !PyBytes_Check(keys) || !PyBytes_Check(strings)) {
        PyErr_SetString(PyExc_TypeError, "a kernel plan's columns, keys and strings are bytes");
        return NULL;
    }
    if (!int_in(a[PLAN_PARTITIONS], "partitions", 1, INT_MAX, &partitions) ||
        !int_in(a[PLAN_FIXED], "fixed", -1, partitions - 1, &fixed) ||
        !int_in(a[PLAN_KEY_SKIP], "key_skip", 0, INT_MAX, &skip) || !int_in(a[PLAN_KINDS], "kinds", 0, 7, &kinds) ||
        !int_in(a[PLAN_LIMIT], "limit", 0, PY_SSIZE_T_MAX, &limit))
        return NULL;
    program_t given;
    int ok = program_read(PyBytes_AS_STRING(cols), PyBytes_GET_SIZE(cols), PyBytes_AS_STRING(keys),
                          PyBytes_GET_SIZE(keys), (const unsigned char *)PyBytes_AS_STRING(strings),
                          PyBytes_GET_SIZE(strings), &given) &&
             given.ncols <= MAX_COLUMNS;
    Py_ssize_t ncols = given.ncols, nkeys = given.nkeys;
    ok = ok && topic >= 0 && topic < 4096 && metric >= 0 && metric < (1 << 20) && (fixed >= 0) == (nkeys == 0);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "malformed kernel plan");
        return NULL;
    }
    plan_t *p = PyMem_Calloc(1, sizeof(plan_t));
    if (p == NULL)
        return (plan_t *)PyErr_NoMemory();
    p->ncols = ncols;
    p->nkeys = nkeys;
    p->cols = PyMem_Malloc((size_t)PyBytes_GET_SIZE(cols));
    p->keys = PyMem_Malloc((size_t)(nkeys ? PyBytes_GET_SIZE(keys) : 1));
    if (p->cols == NULL || p->keys == NULL) {
        plan_free(p);
        return (plan_t *)PyErr_NoMemory();
    }
    memcpy(p->cols, PyBytes_AS_STRING(cols), (size_t)PyBytes_GET_SIZE(cols));
    memcpy(p->keys, PyBytes_AS_STRING(keys), (size_t)PyBytes_GET_SIZE(keys));
    PyObject *parts[] = {strings, a[PLAN_VALUE_PREFIX], a[PLAN_KEY_PREFIX], a[PLAN_DATA_OPEN], a[PLAN_OLD_NULL],
                         a[PLAN_OLD_OPEN]};
    buf_t *into[] = {&p->strings_blob, &p->value_prefix, &p->key_prefix, &p->data_open, &p->old_null,
                     &p->old_open};
    ok = copy_three(p->heads, a[PLAN_HEADS], "heads");
    for (size_t i = 0; ok && i < sizeof parts / sizeof parts[0]; i++)
        ok = copy_bytes(into[i], parts[i]) == 0;
    if (!ok) {
        plan_free(p);
        return NULL;
    }
    /* the copy's strings, checked as the original's were (the same bytes) */
    strings_of((const unsigned char *)p->strings_blob.data, p->strings_blob.len, &p->strings);
    p->topic = topic, p->metric = metric, p->partitions = (int)partitions, p->fixed = (int)fixed;
    p->key_skip = (int)skip, p->kinds = (int)kinds, p->limit = (Py_ssize_t)limit;
    if (canal != Py_None && !canal_from(canal, p)) {
        plan_free(p);
        return NULL;
    }
    return p;
}

static plan_t *plan_from(PyObject *o, int topic, int metric) {
    PyObject *a[PLAN_FIELD_COUNT];
    if (!attrs_of(o, PLAN_ATTRS, PLAN_FIELD_COUNT, a))
        return NULL;
    plan_t *p = plan_read(a, topic, metric);
    attrs_free(a, PLAN_FIELD_COUNT);
    return p;
}

PyDoc_STRVAR(table_doc, "table(table_id, body, plan, topic=0, metric=0)\n--\n\n"
                        "Teach a TABLE_MAP: its body as Python decoded it (after the header, before the CRC) and\n"
                        "what its rows are: a plan (its attributes named as native_spec.BOUNDARY's PLAN), None for\n"
                        "a table not captured (its rows are skipped), or False for Python's (its rows events stop\n"
                        "a run). topic, metric: a plan's topic and table as a run's results number them.");

static PyObject *Kernel_table(Kernel *k, PyObject *args) {
    unsigned long long id;
    Py_buffer body;
    PyObject *what;
    int topic = 0, metric = 0;
    if (!PyArg_ParseTuple(args, "Ky*O|ii", &id, &body, &what, &topic, &metric))
        return NULL;
    plan_t *plan = NULL;
    int state = what == Py_None ? TABLE_SKIP : what == Py_False ? TABLE_PYTHON : TABLE_PLAN;
    if (state == TABLE_PLAN && (plan = plan_from(what, topic, metric)) == NULL) {
        PyBuffer_Release(&body);
        return NULL;
    }
    unsigned char *copy = PyMem_Malloc((size_t)(body.len ? body.len : 1));
    table_t *slot = copy != NULL ? table_slot(k, id) : NULL;
    if (slot == NULL) {
        PyMem_Free(copy);
        plan_free(plan);
        PyBuffer_Release(&body);
        return copy == NULL ? PyErr_NoMemory() : NULL;
    }
    memcpy(copy, body.buf, (size_t)body.len);
    PyMem_Free(slot->body);
    plan_free(slot->plan);
    slot->body = copy, slot->body_len = body.len, slot->plan = plan, slot->state = state;
    PyBuffer_Release(&body);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(begin_doc, "begin(shape, keep)\n--\n\n"
                        "Teach a BEGIN: a QUERY event's body Python decoded as BEGIN, from its schema length on,\n"
                        "without the error code (connector/lane.py, begin_shape); keep: a byte per byte of it,\n"
                        "0xFF where another BEGIN must have the same byte, 0 where it may have any (a value of the\n"
                        "statement's own, such as its start time's microseconds).");

static PyObject *Kernel_begin(Kernel *k, PyObject *args) {
    Py_buffer shape, keep;
    if (!PyArg_ParseTuple(args, "y*y*", &shape, &keep))
        return NULL;
    PyObject *result = NULL;
    if (keep.len != shape.len) {
        PyErr_SetString(PyExc_ValueError, "begin: a keep byte per shape byte");
        goto done;
    }
    for (int i = 0; i < k->nbegins; i++)
        if (k->begins[i].len == shape.len && memcmp(k->begins[i].data, shape.buf, (size_t)shape.len) == 0 &&
            memcmp(k->keeps[i].data, keep.buf, (size_t)keep.len) == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    int at = k->next_begin;
    k->next_begin = (k->next_begin + 1) % MAX_BEGINS;
    if (k->nbegins < MAX_BEGINS)
        k->nbegins++;
    k->begins[at].len = k->keeps[at].len = 0;
    if (buf_put(&k->begins[at], shape.buf, shape.len) == 0 && buf_put(&k->keeps[at], keep.buf, keep.len) == 0)
        result = Py_NewRef(Py_None);
    else
        k->begins[at].len = k->keeps[at].len = 0; /* half made: it matches no BEGIN (a shape has a byte) */
done:
    PyBuffer_Release(&shape);
    PyBuffer_Release(&keep);
    return result;
}

PyDoc_STRVAR(inflater_doc, "inflater(decompress, native=True)\n--\n\n"
                           "How a TRANSACTION_PAYLOAD's zstd body is inflated: decompress(body,\n"
                           "uncompressed_size) -> bytes, the parser's own (binlog/parser.inflater). Without one,\n"
                           "every payload is Python's. native: the system's libzstd inflates a body that is one\n"
                           "whole frame of the header's size, where there is one (decompress does the others).");

static PyObject *Kernel_inflater(Kernel *k, PyObject *args) {
    PyObject *decompress;
    int native = 1;
    if (!PyArg_ParseTuple(args, "O|p", &decompress, &native))
        return NULL;
    if (!PyCallable_Check(decompress)) {
        PyErr_SetString(PyExc_TypeError, "inflater: a callable");
        return NULL;
    }
    k->native_inflate = native;
    Py_XSETREF(k->inflate, Py_NewRef(decompress));
    Py_RETURN_NONE;
}

PyDoc_STRVAR(records_doc, "records(on)\n--\n\n"
                          "Transaction records (connector/extras.TransactionTopic): whether run() also says, for\n"
                          "each transaction whose messages it made or whose XID it read, its GTID, first change\n"
                          "and messages by table.");

static PyObject *Kernel_records(Kernel *k, PyObject *on) {
    int flag = PyObject_IsTrue(on);
    if (flag < 0)
        return NULL;
    k->records = flag;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(clear_doc, "clear()\n--\n\nForget every table taught (a DDL statement, a new server's events).");

static PyObject *Kernel_clear(Kernel *k, PyObject *unused) {
    tables_clear(k);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(configure_doc,
             "configure(checksum, mariadb, table_map_post, rows_v1_post, rows_v2_post, query_post, query_max)\n"
             "--\n\n"
             "The source's FORMAT_DESCRIPTION: whether events end with a CRC-32, the post-header lengths the\n"
             "kernel reads; and the most bytes of a statement's text (ROWS_QUERY/ANNOTATE_ROWS) a row\n"
             "message's `sql` carries (0: none wanted, `sql` is \"\"), with the mark a cut text ends in\n"
             "before and after its size (connector/querytext.py, QueryText.mark).\n"
             "Forgets every table taught.");

static PyObject *Kernel_configure(Kernel *k, PyObject *args) {
    int checksum, mariadb, tm, v1, v2, q, query_max;
    Py_buffer before, after;
    if (!PyArg_ParseTuple(args, "ppiiiiiy*y*", &checksum, &mariadb, &tm, &v1, &v2, &q, &query_max, &before, &after))
        return NULL;
    k->mark_before.len = k->mark_after.len = 0;
    int kept = buf_put(&k->mark_before, before.buf, before.len) == 0 &&
               buf_put(&k->mark_after, after.buf, after.len) == 0; /* else no memory, said */
    PyBuffer_Release(&before);
    PyBuffer_Release(&after);
    if (!kept)
        return NULL;
    if (query_max < 0) {
        PyErr_SetString(PyExc_ValueError, "query_max is 0 (no statement text) or more bytes");
        return NULL;
    }
    tables_clear(k);
    /* the lengths decode_rows_header and decode_query can read: a 4 or 6 byte table id, status vars;
       0 for the rows events a server does not write (MySQL 8 lists no v1 length, 5.5 no v2) */
    if (!((tm == 6 || tm == 8) && (v1 == 0 || v1 == 6 || v1 == 8) && (v2 == 0 || v2 == 10) && q >= 13 && q <= 255)) {
        k->configured = 0; /* a layout the kernel does not read: every event is Python's */
        Py_RETURN_FALSE;
    }
    k->checksum = checksum, k->mariadb = mariadb, k->query_max = query_max;
    k->table_map_post = tm, k->rows_v1_post = v1, k->rows_v2_post = v2, k->query_post = q;
    k->configured = 1;
    k->nbegins = k->next_begin = 0; /* a BEGIN's shape is read with the query post-header length */
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(file_doc, "file(avro_name, number)\n--\n\n"
                       "The binlog file being read: its name as an Avro string, and its numeric extension.");

static PyObject *Kernel_file(Kernel *k, PyObject *args) {
    Py_buffer name;
    long long number;
    if (!PyArg_ParseTuple(args, "y*L", &name, &number))
        return NULL;
    k->file.len = 0;
    int r = buf_put(&k->file, name.buf, name.len);
    PyBuffer_Release(&name);
    if (r < 0)
        return NULL;
    if (number < 0 || number > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a file number is 0 to 2^32 - 1");
        return NULL;
    }
    k->file_number = number;
    Py_RETURN_NONE;
}

/* -- the open transaction ---------------------------------------------------------------------- */

static void txn_reset(Kernel *k) {
    k->in_txn = k->began = k->has_gtid = 0;
    k->gtid_len = 0;
    k->sql.len = 0;
    k->txn_rows = 0;
    k->txn_start = k->handed = k->txn_first = -1;
    k->part_open = 0;
}

/* -- results, struct sequences whose fields native_spec.BOUNDARY names ------------------------- */

static PyTypeObject *RunType, *TransactionType;

/* A result of `type` holding items (new references, stolen; NULL where making one failed: then
 * every other is released and NULL returned). */
static PyObject *result_of(PyTypeObject *type, PyObject **items, int n) {
    PyObject *r = NULL;
    int whole = 1;
    for (int i = 0; i < n; i++)
        whole = whole && items[i] != NULL;
    if (whole && (r = PyStructSequence_New(type)) != NULL) {
        for (int i = 0; i < n; i++)
            PyStructSequence_SET_ITEM(r, i, items[i]);
        return r;
    }
    for (int i = 0; i < n; i++)
        Py_XDECREF(items[i]);
    return NULL;
}

static PyObject *txn_state(const Kernel *k) {
    PyObject *items[TRANSACTION_FIELD_COUNT];
    items[TRANSACTION_IN_TXN] = PyBool_FromLong(k->in_txn);
    items[TRANSACTION_BEGAN] = PyBool_FromLong(k->began);
    items[TRANSACTION_GTID] = k->has_gtid ? PyUnicode_DecodeASCII(k->gtid, k->gtid_len, NULL) : Py_NewRef(Py_None);
    items[TRANSACTION_ROWS] = PyLong_FromLongLong(k->txn_rows);
    items[TRANSACTION_START] = PyLong_FromLongLong(k->txn_start);
    items[TRANSACTION_HANDED] = PyLong_FromLongLong(k->handed);
    /* taken as UTF-8 */
    items[TRANSACTION_SQL] = PyUnicode_DecodeUTF8(k->sql.data ? k->sql.data : "", k->sql.len, "strict");
    return result_of(TransactionType, items, TRANSACTION_FIELD_COUNT);
}

PyDoc_STRVAR(release_doc, "release()\n--\n\n"
                          "The open transaction's state, a KernelTransaction (in_txn, began, gtid, rows, start,\n"
                          "handed, sql), handed to Python, which goes on with it (sql: the statement text its next\n"
                          "rows event carries); the kernel holds none after.");

static PyObject *Kernel_release(Kernel *k, PyObject *unused) {
    PyObject *state = txn_state(k);
    if (state != NULL)
        txn_reset(k);
    return state;
}

/* -- a run's output ---------------------------------------------------------------------------- */

/* The references of messages items[from..to) hold. */
static void outs_release(out_t *items, Py_ssize_t from, Py_ssize_t to) {
    for (Py_ssize_t i = from; i < to; i++) {
        Py_XDECREF(items[i].key);
        Py_XDECREF(items[i].value);
    }
}

static void outs_clear(Kernel *k) {
    for (Py_ssize_t t = 0; t < k->nouts; t++) {
        outs_release(k->outs[t].items, 0, k->outs[t].len);
        k->outs[t].len = 0;
    }
    k->out_total = 0;
    outs_release(k->event_outs, 0, k->event_len);
    k->event_len = 0;
}

static int grow(void **items, Py_ssize_t *cap, Py_ssize_t need, size_t size) {
    if (need <= *cap)
        return 0;
    Py_ssize_t cap2 = *cap ? *cap : 16;
    while (cap2 < need)
        cap2 *= 2;
    void *grown = PyMem_Realloc(*items, (size_t)cap2 * size);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *items = grown;
    *cap = cap2;
    return 0;
}

/* Inside a TRANSACTION_PAYLOAD: note what an event added, so that it can be undone. */
static int note_undo(Kernel *k, int what, Py_ssize_t at, long long n) {
    if (!k->staging)
        return 0;
    if (grow((void **)&k->undo, &k->undo_cap, k->nundo + 1, sizeof(undo_t)) < 0)
        return -1;
    k->undo[k->nundo++] = (undo_t){what, at, n};
    return 0;
}

/* One rows event's messages, all or none, to their topics' outputs. */
static int take_event(Kernel *k, const plan_t *plan) {
    if (plan->topic >= k->nouts) {
        topic_out_t *grown = PyMem_Realloc(k->outs, (size_t)(plan->topic + 1) * sizeof(topic_out_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memset(grown + k->nouts, 0, (size_t)(plan->topic + 1 - k->nouts) * sizeof(topic_out_t));
        k->outs = grown;
        k->nouts = plan->topic + 1;
    }
    topic_out_t *o = &k->outs[plan->topic];
    if (grow((void **)&o->items, &o->cap, o->len + k->event_len, sizeof(out_t)) < 0 ||
        note_undo(k, UNDO_OUT, plan->topic, k->event_len) < 0)
        return -1;
    if (k->event_len > 0) /* none: a topic's outputs not grown yet have no items (NULL + 0 is undefined) */
        memcpy(o->items + o->len, k->event_outs, (size_t)k->event_len * sizeof(out_t));
    o->len += k->event_len;
    k->out_total += k->event_len;
    k->event_len = 0;
    if (plan->partitions > o->partitions)
        o->partitions = plan->partitions;
    return 0;
}

typedef struct {
    Kernel *k;
    const plan_t *plan;
} emit_ctx;

/* transcode_rows's emit: one message with its partition, or DECLINE if it is over the topic's limit
 * (Python's oversize policy decides). */
static int emit_message(void *ctx, const char *key, Py_ssize_t key_len, const char *value, Py_ssize_t value_len) {
    emit_ctx *e = ctx;
    Kernel *k = e->k;
    const plan_t *plan = e->plan;
    if (key_len > plan->limit || value_len > plan->limit - key_len)
        return DECLINE;
    int32_t partition = plan->fixed;
    if (partition < 0)
        partition = key_partition((const unsigned char *)key, key_len, plan->key_skip, plan->partitions);
    if (grow((void **)&k->event_outs, &k->event_cap, k->event_len + 1, sizeof(out_t)) < 0)
        return FAIL;
    PyObject *v = PyBytes_FromStringAndSize(value, value_len);
    PyObject *kb = key != NULL ? PyBytes_FromStringAndSize(key, key_len) : NULL;
    if (v == NULL || (key != NULL && kb == NULL)) {
        Py_XDECREF(v);
        Py_XDECREF(kb);
        return FAIL;
    }
    k->event_outs[k->event_len++] = (out_t){kb, v, partition};
    return DONE;
}

/* -- events ------------------------------------------------------------------------------------ */

typedef struct {
    uint32_t timestamp, server_id, length, log_pos;
    int type;
    long long pos; /* where the event starts */
    const unsigned char *body;
    Py_ssize_t n; /* body bytes: after the header, before the CRC */
} event_t;

/* An event's handler: taken whole, or left to Python untouched (UNTAUGHT: a BEGIN or TABLE_MAP
 * whose bytes Python has not shown it, which Python may decode and teach before the kernel goes on). */
enum { TAKEN = 1, PYTHONS = 0, UNTAUGHT = 2 };

/* A length-encoded integer, as Reader.packed; -1 when it is not one or does not fit. */
static Py_ssize_t packed(const unsigned char *b, Py_ssize_t n, Py_ssize_t *at, uint64_t *value) {
    Py_ssize_t r = *at;
    if (r >= n)
        return -1;
    int first = b[r], size = first < 251 ? 0 : first == 252 ? 2 : first == 253 ? 3 : first == 254 ? 8 : -1;
    if (size < 0 || n - r - 1 < size)
        return -1;
    *value = size ? le(b + r + 1, size) : (uint64_t)first;
    *at = r + 1 + size;
    return 0;
}

static int gtid_mysql(Kernel *k, const event_t *e) {
    const unsigned char *b = e->body;
    Py_ssize_t n = e->n, r = 25;
    if (k->mariadb || k->in_txn || n < 25)
        return PYTHONS;
    /* what decode_gtid reads after the number, so that a layout it would refuse stays Python's */
    if (r < n && b[r] == 2) {
        if (n - r < 17)
            return PYTHONS;
        r += 17;
        if (n - r >= 7) {
            int original = b[r + 6] & 0x80;
            r += 7;
            if (original && n - r < 7)
                return PYTHONS;
            r += original ? 7 : 0;
        }
        uint64_t length;
        if (n - r > 0 && packed(b, n, &r, &length) < 0)
            return PYTHONS;
        if (n - r >= 4 && (b[r + 3] & 0x80) && n - r < 8)
            return PYTHONS;
    }
    uint64_t gno = le(b + 17, 8);
    int anonymous = e->type == ANONYMOUS_GTID_LOG_EVENT;
    if (!anonymous && (gno == 0 || gno >= (1ull << 63)))
        return PYTHONS; /* numbers no server gives: Python says what it makes of them */
    k->in_txn = 1, k->began = 0, k->txn_start = e->pos, k->txn_rows = 0, k->handed = -1;
    k->has_gtid = !anonymous;
    if (!anonymous) {
        const unsigned char *s = b + 1;
        memcpy(k->pending_sid, s, 16);
        k->pending_gno = gno;
        static const char hex[] = "0123456789abcdef";
        char *t = k->gtid; /* the UUID as MySQL prints it (8-4-4-4-12 hex digits), ':', the number */
        for (int i = 0; i < 16; i++) {
            if (i == 4 || i == 6 || i == 8 || i == 10)
                *t++ = '-';
            *t++ = hex[s[i] >> 4], *t++ = hex[s[i] & 15];
        }
        *t++ = ':'; /* the number: padded_digits, not printf (its cost showed in the single-row profile) */
        k->gtid_len = (int)(t - k->gtid) + padded_digits(t, gno, 1);
    }
    return TAKEN;
}

static int gtid_mariadb(Kernel *k, const event_t *e) {
    const unsigned char *b = e->body;
    if (!k->mariadb || k->in_txn || e->n < 13)
        return PYTHONS;
    int flags = b[12];
    if (flags & (FL_STANDALONE | FL_PREPARED_XA | FL_COMPLETED_XA))
        return PYTHONS; /* a statement of its own (DDL), or XA: the assembler's */
    if ((flags & FL_GROUP_COMMIT_ID) && e->n < 21)
        return PYTHONS;
    k->in_txn = 1, k->began = 1, k->txn_start = e->pos, k->txn_rows = 0, k->handed = -1, k->has_gtid = 1;
    k->pending_gno = le(b, 8);
    k->pending_domain = (uint32_t)le(b + 8, 4);
    k->pending_server = e->server_id;
    int n = padded_digits(k->gtid, k->pending_domain, 1); /* domain-server-sequence */
    k->gtid[n++] = '-';
    n += padded_digits(k->gtid + n, k->pending_server, 1);
    k->gtid[n++] = '-';
    k->gtid_len = n + padded_digits(k->gtid + n, k->pending_gno, 1);
    return TAKEN;
}

static int begin_matches(const buf_t *shape, const buf_t *keep, const unsigned char *b, Py_ssize_t n) {
    if (shape->len != 1 + n - 11 || shape->len < 1)
        return 0;
    const unsigned char *s = (const unsigned char *)shape->data, *m = (const unsigned char *)keep->data;
    if ((s[0] ^ b[8]) & m[0])
        return 0;
    for (Py_ssize_t i = 1; i < shape->len; i++)
        if ((s[i] ^ b[11 + i - 1]) & m[i])
            return 0;
    return 1;
}

/* BEGIN: a QUERY event whose shape (schema length, status variables, schema, text) Python taught. */
static int query(Kernel *k, const event_t *e) {
    Py_ssize_t post = k->query_post;
    if (e->n < post)
        return PYTHONS;
    const unsigned char *b = e->body;
    Py_ssize_t status_len = (Py_ssize_t)le(b + 11, 2), schema_len = b[8];
    static const char BEGIN[] = "BEGIN";
    Py_ssize_t text = post + status_len + schema_len + 1;
    if (text > e->n || e->n - text != 5 || memcmp(b + text, BEGIN, 5) != 0)
        return PYTHONS;
    /* the shape: the schema length, then everything after the error code */
    int known = 0;
    for (int i = 0; i < k->nbegins && !known; i++)
        known = begin_matches(&k->begins[i], &k->keeps[i], b, e->n);
    if (!known)
        return UNTAUGHT;
    if (!k->in_txn) {
        k->txn_start = e->pos, k->txn_rows = 0, k->handed = -1, k->has_gtid = 0;
    }
    k->in_txn = k->began = 1;
    return TAKEN;
}

static uint64_t table_id_at(const unsigned char *b, int post) {
    return le(b, post == 6 ? 4 : 6);
}

static int table_map(Kernel *k, const event_t *e) {
    if (e->n < k->table_map_post)
        return PYTHONS;
    const table_t *t = table_find(k, table_id_at(e->body, k->table_map_post));
    if (t == NULL || t->body_len != e->n || memcmp(t->body, e->body, (size_t)e->n) != 0)
        return UNTAUGHT;
    return TAKEN; /* the parser already holds this very TABLE_MAP for the id */
}

static int all_set(const unsigned char *bitmap, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (!(bitmap[i >> 3] >> (i & 7) & 1))
            return 0;
    return 1;
}

typedef struct {
    int kind, v2;
} rows_type_t;

/* A rows event's kind and version (v2: the extra data after its flags), by its type (handle's six). */
static const rows_type_t ROWS_TYPES[256] = {
    [WRITE_ROWS_EVENT_V1] = {KIND_WRITE, 0}, [UPDATE_ROWS_EVENT_V1] = {KIND_UPDATE, 0},
    [DELETE_ROWS_EVENT_V1] = {KIND_DELETE, 0}, [WRITE_ROWS_EVENT] = {KIND_WRITE, 1},
    [UPDATE_ROWS_EVENT] = {KIND_UPDATE, 1},    [DELETE_ROWS_EVENT] = {KIND_DELETE, 1},
};

/* The envelope before a row's data, and the `source` fields before its number (encoding._envelope);
 * `sql`: the statement text it carries (the first row's: `sql` is "" in the others). */
static int envelope(Kernel *k, const plan_t *plan, const event_t *e, int kind, long long ts_ms, const buf_t *sql,
                    buf_t *open, buf_t *tail) {
    static const char none = 0, some = 2; /* gtid: the union's null branch (0) or string (1) */
    open->len = tail->len = 0;
    int bad = buf_put(open, plan->value_prefix.data, plan->value_prefix.len) < 0 ||
              buf_long(open, k->file_number << 32 | (long long)e->pos) < 0 ||
              buf_put(open, plan->heads[kind].data, plan->heads[kind].len) < 0 ||
              buf_long(open, (int64_t)e->timestamp * 1000) < 0 || buf_long(open, ts_ms) < 0 ||
              buf_long(open, sql->len) < 0 || buf_put(open, sql->data, sql->len) < 0;
    if (!bad && k->has_gtid)
        bad = buf_put(open, &some, 1) < 0 || buf_long(open, k->gtid_len) < 0 || buf_put(open, k->gtid, k->gtid_len) < 0;
    else if (!bad)
        bad = buf_put(open, &none, 1) < 0;
    bad = bad || buf_put(open, plan->data_open.data, plan->data_open.len) < 0;
    bad = bad || buf_long(tail, e->server_id) < 0 || buf_put(tail, k->file.data, k->file.len) < 0 ||
          buf_long(tail, e->pos) < 0;
    return bad ? -1 : 0;
}

static int count_rows(Kernel *k, const plan_t *plan, int kind, long long n) {
    Py_ssize_t at = (Py_ssize_t)plan->metric * 3 + kind;
    if (at >= k->nrow_counts) {
        Py_ssize_t cap = k->nrow_counts;
        if (grow((void **)&k->row_counts, &cap, at + 1, sizeof(long long)) < 0)
            return -1;
        memset(k->row_counts + k->nrow_counts, 0, (size_t)(cap - k->nrow_counts) * sizeof(long long));
        k->nrow_counts = cap;
    }
    k->row_counts[at] += n;
    return note_undo(k, UNDO_ROWS, at, n);
}

/* Transaction records: the open transaction's part of this run, begun if it has none yet. */
static int open_part(Kernel *k) {
    if (k->part_open)
        return 0;
    if (grow((void **)&k->parts, &k->parts_cap, k->nparts + 1, sizeof(part_t)) < 0)
        return -1;
    part_t *p = &k->parts[k->nparts++];
    p->first = k->txn_first, p->counts = k->npart_counts, p->committed = 0;
    p->has_gtid = k->has_gtid, p->gtid_len = k->has_gtid ? k->gtid_len : 0;
    memcpy(p->gtid, k->gtid, (size_t)p->gtid_len);
    k->part_open = 1;
    return 0;
}

/* Transaction records: n more messages of a table in the open transaction's part. */
static int count_part(Kernel *k, int32_t metric, long long n) {
    if (open_part(k) < 0)
        return -1;
    Py_ssize_t at = k->parts[k->nparts - 1].counts;
    while (at < k->npart_counts && k->part_counts[at].metric != metric)
        at++;
    if (at == k->npart_counts) {
        if (grow((void **)&k->part_counts, &k->part_counts_cap, k->npart_counts + 1, sizeof(part_count_t)) < 0)
            return -1;
        k->part_counts[k->npart_counts++] = (part_count_t){metric, 0};
    }
    k->part_counts[at].n += n;
    return note_undo(k, UNDO_PART, at, n);
}

typedef struct {
    buf_t open, first, tail; /* first: the first row's envelope, where it carries a statement's text */
    long long ts_ms;
    buf_t rest; /* canal-json: the other rows' `sql` part */
} scratch_t;

/* canal-json: what a rows event's messages share (canal._event_parts): from `],"database"` to
 * `"old":` (the event's time, the transaction's GTID, the message id) in open, the first row's `sql`
 * part (the statement's text) in first and the others' in rest, the last fields (ts, type) in tail. */
static int canal_parts(Kernel *k, const plan_t *plan, const event_t *e, int kind, long long ts_ms, scratch_t *sc) {
    buf_t *open = &sc->open, *first = &sc->first, *rest = &sc->rest, *tail = &sc->tail;
    open->len = first->len = rest->len = tail->len = 0;
    int bad = buf_put(open, plan->c_database.data, plan->c_database.len) < 0 ||
              buf_int_text(open, (long long)e->timestamp * 1000) < 0 || buf_put(open, ",\"gtid\":", 8) < 0;
    if (!bad && k->has_gtid)
        bad = buf_put(open, "\"", 1) < 0 || put_escaped(open, (const unsigned char *)k->gtid, k->gtid_len) < 0 ||
              buf_put(open, "\"", 1) < 0;
    else if (!bad)
        bad = buf_put(open, "null", 4) < 0;
    bad = bad || buf_put(open, ",\"id\":", 6) < 0 ||
          buf_int_text(open, k->file_number << 32 | (long long)e->pos) < 0 ||
          buf_put(open, plan->c_mysql.data, plan->c_mysql.len) < 0;
    bad = bad || buf_put(first, plan->c_pk.data, plan->c_pk.len) < 0 || buf_put(first, "\"", 1) < 0 ||
          put_escaped(first, (const unsigned char *)k->sql.data, k->sql.len) < 0 ||
          buf_put(first, "\",\"sqlType\":", 12) < 0;
    bad = bad || buf_put(rest, plan->c_pk.data, plan->c_pk.len) < 0 || buf_put(rest, "\"\",\"sqlType\":", 13) < 0;
    bad = bad || buf_put(tail, plan->c_table.data, plan->c_table.len) < 0 || buf_int_text(tail, ts_ms) < 0 ||
          buf_put(tail, plan->c_kinds[kind].data, plan->c_kinds[kind].len) < 0;
    return bad ? -1 : 0;
}

static bytes_t of_buf(const buf_t *b) { return (bytes_t){(const unsigned char *)b->data, b->len}; }

/* A rows event of a taught table: every row to its message, or PYTHONS with nothing taken. */
static int rows(Kernel *k, const event_t *e, scratch_t *sc) {
    rows_type_t rt = ROWS_TYPES[e->type];
    int post = rt.v2 ? k->rows_v2_post : k->rows_v1_post, id_len = post == 6 ? 4 : 6;
    const unsigned char *b = e->body;
    Py_ssize_t n = e->n, r = id_len + 2;
    if (!k->in_txn || post == 0 || n < r)
        return PYTHONS;
    const table_t *t = table_find(k, table_id_at(b, post));
    if (t == NULL || t->state == TABLE_PYTHON)
        return PYTHONS;
    if (rt.v2) {
        if (n - r < 2 || le(b + r, 2) < 2 || (Py_ssize_t)le(b + r, 2) > n - r)
            return PYTHONS;
        r += (Py_ssize_t)le(b + r, 2);
    }
    uint64_t count;
    if (packed(b, n, &r, &count) < 0 || count > MAX_COLUMNS)
        return PYTHONS;
    Py_ssize_t width = (Py_ssize_t)(count + 7) / 8, images = rt.kind == KIND_UPDATE ? 2 : 1;
    if (n - r < width * images)
        return PYTHONS;
    const unsigned char *present = b + r, *present_after = b + r + width;
    r += width * images;
    if (t->state == TABLE_SKIP)
        return TAKEN; /* a table not captured: read up to its bitmaps, as decode_rows skips it */
    const plan_t *plan = t->plan;
    if ((Py_ssize_t)count != plan->ncols || !(plan->kinds >> rt.kind & 1) || !all_set(present, plan->ncols) ||
        (images == 2 && !all_set(present_after, plan->ncols)))
        return PYTHONS;
    static const buf_t no_sql = {NULL, 0, 0};
    if (plan->canal ? canal_parts(k, plan, e, rt.kind, sc->ts_ms, sc) < 0
                    : envelope(k, plan, e, rt.kind, sc->ts_ms, &no_sql, &sc->open, &sc->tail) < 0 ||
                          (k->sql.len && envelope(k, plan, e, rt.kind, sc->ts_ms, &k->sql, &sc->first, &sc->tail) < 0))
        return -1;
    bytes_t open = of_buf(&sc->open), first = k->sql.len ? of_buf(&sc->first) : open;
    program_t prog = {plan->cols, plan->ncols, plan->keys, plan->nkeys, plan->strings, of_buf(&plan->key_prefix),
                      first, open, of_buf(&plan->old_null), of_buf(&plan->old_open), of_buf(&sc->tail)};
    emit_ctx ctx = {k, plan};
    Py_ssize_t before = k->event_len;
    long long base = k->staging ? k->txn_rows - k->payload_rows : 0; /* `source.row`, as flat.RowBatch's */
    int done;
    Py_ssize_t rows = -1; /* the event's rows, where its messages are not one a row (canal-json per event) */
    if (plan->canal) {
        canal_t canal = {plan->names, (const sqltype_t *)plan->types.data, plan->full_old, plan->per_event,
                         of_buf(&sc->open),
                         of_buf(&sc->first), of_buf(&sc->rest), of_buf(&sc->tail)};
        done = canal_rows(&prog, &canal, b + r, n - r, rt.kind, emit_message, &ctx, &rows);
    } else {
        done = transcode_rows(&prog, b + r, n - r, rt.kind, base, emit_message, &ctx);
    }
    if (done != DONE) {
        outs_release(k->event_outs, before, k->event_len);
        k->event_len = before;
        return done == FAIL ? -1 : PYTHONS;
    }
    long long made = k->event_len;
    if (count_rows(k, plan, rt.kind, made) < 0 || take_event(k, plan) < 0)
        return -1;
    if (made && k->txn_rows == 0)
        k->txn_first = e->pos;
    /* a transaction record counts changes (rows), as the Python path's does; the rest counts messages */
    if (made && k->records && count_part(k, plan->metric, rows >= 0 ? rows : made) < 0)
        return -1;
    k->txn_rows += made;
    if (made)
        k->handed = e->pos;
    k->sql.len = 0; /* the statement's text rode on this event (flat.FlatMessageBuilder.batch) */
    return TAKEN;
}

/* The GTID a transaction committed, into the run's record of them. */
static int note_gtid(Kernel *k) {
    if (!k->has_gtid)
        return 0;
    if (k->mariadb) {
        for (int i = 0; i < k->ndomains; i++)
            if (k->domains[i].domain == k->pending_domain) {
                k->domains[i] = (domain_t){k->pending_domain, k->pending_server, k->pending_gno};
                return 0;
            }
        if (k->ndomains == 64)
            return 1; /* a 65th domain in one run: let Python commit it */
        k->domains[k->ndomains++] = (domain_t){k->pending_domain, k->pending_server, k->pending_gno};
        return 0;
    }
    run_t *last = k->nruns ? &k->runs[k->nruns - 1] : NULL;
    if (last != NULL && last->last + 1 == k->pending_gno && memcmp(last->sid, k->pending_sid, 16) == 0) {
        last->last = k->pending_gno;
        return 0;
    }
    if (grow((void **)&k->runs, &k->runs_cap, k->nruns + 1, sizeof(run_t)) < 0)
        return -1;
    run_t *run = &k->runs[k->nruns++];
    memcpy(run->sid, k->pending_sid, 16);
    run->first = run->last = k->pending_gno;
    return 0;
}

static int xid(Kernel *k, const event_t *e) {
    if (!k->in_txn || e->n < 8)
        return PYTHONS;
    int r = note_gtid(k);
    if (r != 0)
        return r > 0 ? PYTHONS : -1;
    if (k->records && k->txn_rows > 0) { /* its END: in this run's part, made now if its rows were earlier runs' */
        if (open_part(k) < 0)
            return -1;
        k->parts[k->nparts - 1].committed = 1;
    }
    k->commits++;
    k->commit_pos = e->log_pos;
    k->commit_server = e->server_id;
    if (e->timestamp)
        k->timestamp = e->timestamp;
    txn_reset(k);
    return TAKEN;
}

/* The statement text a row message's `sql` carries (querytext.QueryText.of): all of it, or when it is longer
 * than query_max bytes, what leaves room for the mark (its parts around the text's size), cut where a
 * character starts. */
static int take_sql(Kernel *k, const unsigned char *text, Py_ssize_t n) {
    k->sql.len = 0;
    if (n <= k->query_max)
        return buf_put(&k->sql, text, n);
    char digits[24], *size = digits_before(digits + sizeof digits, (uint64_t)n);
    Py_ssize_t size_len = digits + sizeof digits - size;
    Py_ssize_t m = k->mark_before.len + size_len + k->mark_after.len;
    Py_ssize_t keep = k->query_max > m ? k->query_max - m : 0; /* < n: text[keep] is there */
    while (keep > 0 && (text[keep] & 0xC0) == 0x80) /* a character cut in two is left out */
        keep--;
    return buf_put(&k->sql, text, keep) < 0 || buf_put(&k->sql, k->mark_before.data, k->mark_before.len) < 0 ||
                   buf_put(&k->sql, size, size_len) < 0 || buf_put(&k->sql, k->mark_after.data, k->mark_after.len) < 0
               ? -1
               : 0;
}

/* ROWS_QUERY / ANNOTATE_ROWS: skipped, or the text the next rows event's first row carries. Inside a
 * transaction only, and strict UTF-8 only (events.text keeps other bytes visible, as escapes: Python's);
 * Lane.ready keeps the kernel off while the Python path holds a text not yet carried. */
static int annotation(Kernel *k, const event_t *e) {
    /* decode_rows_query reads a length byte; ANNOTATE_ROWS is all text */
    Py_ssize_t skip = e->type == ROWS_QUERY_LOG_EVENT;
    if (e->n < skip)
        return PYTHONS;
    if (k->query_max == 0)
        return TAKEN;
    if (!k->in_txn || !utf8_valid(e->body + skip, e->n - skip))
        return PYTHONS;
    return take_sql(k, e->body + skip, e->n - skip) < 0 ? -1 : TAKEN;
}

static int payload(Kernel *k, const event_t *e, scratch_t *sc);

static int handle(Kernel *k, const event_t *e, scratch_t *sc) {
    switch (e->type) {
    case GTID_LOG_EVENT:
    case ANONYMOUS_GTID_LOG_EVENT:
        return gtid_mysql(k, e);
    case GTID_EVENT:
        return gtid_mariadb(k, e);
    case QUERY_EVENT:
        return query(k, e);
    case TABLE_MAP_EVENT:
        return table_map(k, e);
    case WRITE_ROWS_EVENT_V1:
    case UPDATE_ROWS_EVENT_V1:
    case DELETE_ROWS_EVENT_V1:
    case WRITE_ROWS_EVENT:
    case UPDATE_ROWS_EVENT:
    case DELETE_ROWS_EVENT:
        return rows(k, e, sc);
    case XID_EVENT:
        return xid(k, e);
    case ROWS_QUERY_LOG_EVENT:
    case ANNOTATE_ROWS_EVENT:
        return annotation(k, e);
    case TRANSACTION_PAYLOAD_EVENT:
        return payload(k, e, sc);
    }
    return PYTHONS;
}

/* -- compressed transactions ------------------------------------------------------------------- */

/* The transaction's state and the run's totals an event inside a payload may change. */
typedef struct {
    int in_txn, began, has_gtid, gtid_len;
    long long txn_rows, txn_start, handed, txn_first, commits, commit_pos, commit_server, timestamp;
    Py_ssize_t nruns;
    uint64_t run_last;
    int part_open;
    Py_ssize_t nparts, npart_counts;
} mark_t;

static mark_t mark_of(const Kernel *k) {
    return (mark_t){k->in_txn, k->began, k->has_gtid, k->gtid_len, k->txn_rows, k->txn_start, k->handed,
                    k->txn_first, k->commits, k->commit_pos, k->commit_server, k->timestamp, k->nruns,
                    k->nruns ? k->runs[k->nruns - 1].last : 0, k->part_open, k->nparts, k->npart_counts};
}

/* Back to the mark: the transaction as it was, and every message and count added since undone. */
static void undo_to(Kernel *k, const mark_t *m) {
    for (Py_ssize_t i = k->nundo - 1; i >= 0; i--) {
        const undo_t *u = &k->undo[i];
        if (u->what == UNDO_ROWS || u->what == UNDO_PART) {
            *(u->what == UNDO_ROWS ? &k->row_counts[u->at] : &k->part_counts[u->at].n) -= u->n;
            continue;
        }
        topic_out_t *o = &k->outs[u->at];
        outs_release(o->items, o->len - (Py_ssize_t)u->n, o->len);
        o->len -= (Py_ssize_t)u->n;
        k->out_total -= u->n;
    }
    k->nundo = 0;
    k->sql.len = 0; /* none at the mark: a payload is not taken while a text waits (payload) */
    k->in_txn = m->in_txn, k->began = m->began, k->has_gtid = m->has_gtid, k->gtid_len = m->gtid_len;
    k->txn_rows = m->txn_rows, k->txn_start = m->txn_start, k->handed = m->handed, k->txn_first = m->txn_first;
    k->nparts = m->nparts, k->npart_counts = m->npart_counts, k->part_open = m->part_open;
    if (k->part_open) /* the open transaction's part, which the payload's XID may have marked */
        k->parts[k->nparts - 1].committed = 0;
    k->commits = m->commits, k->commit_pos = m->commit_pos, k->commit_server = m->commit_server;
    k->timestamp = m->timestamp;
    k->nruns = m->nruns;
    if (k->nruns)
        k->runs[k->nruns - 1].last = m->run_last;
}

/* A payload's header fields (BinlogParser._payload): each a length-encoded field number,
 * then its value, a length-encoded integer inside length-prefixed bytes; up to the end mark.
 * 0 with the body's offset, or -1 for a header the parser would refuse. */
static int payload_header(const unsigned char *b, Py_ssize_t n, Py_ssize_t *at, uint64_t fields[4], int *have) {
    Py_ssize_t r = 0;
    for (;;) { /* each field moves on by at least its number's byte and its length's */
        uint64_t field, len, value;
        Py_ssize_t v = 0;
        if (packed(b, n, &r, &field) < 0)
            return -1;
        if (field == OTW_PAYLOAD_HEADER_END_MARK)
            break;
        if (packed(b, n, &r, &len) < 0 || len > (uint64_t)(n - r) || packed(b + r, (Py_ssize_t)len, &v, &value) < 0)
            return -1;
        r += (Py_ssize_t)len;
        if (field <= OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD) {
            fields[field] = value;
            *have |= 1 << field;
        }
    }
    *at = r;
    return 0;
}

/* The system's libzstd (libzstd.so.1, its stable API), looked up once: a payload inflated without a
 * call into Python, which costs a single-row transaction about a microsecond. Not there: the
 * parser's decompressor inflates every payload. */
typedef struct {
    void *(*create)(void);
    size_t (*free)(void *);
    size_t (*decompress)(void *, void *, size_t, const void *, size_t);
    unsigned (*is_error)(size_t);
    unsigned long long (*content_size)(const void *, size_t);
    size_t (*frame_size)(const void *, size_t);
} zstd_api;

static const zstd_api *zstd_lib(void) {
    static zstd_api api;
    static int looked; /* the GIL is held: one lookup */
    if (!looked) {
        looked = 1;
        void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
        const char *names[] = {"ZSTD_createDCtx", "ZSTD_freeDCtx", "ZSTD_decompressDCtx", "ZSTD_isError",
                               "ZSTD_getFrameContentSize", "ZSTD_findFrameCompressedSize"};
        void *found[6] = {0};
        for (int i = 0; lib != NULL && i < 6; i++)
            if ((found[i] = dlsym(lib, names[i])) == NULL)
                lib = NULL;
        if (lib != NULL) { /* object pointers to function pointers: POSIX's dlsym contract */
            memcpy(&api.free, &found[1], sizeof found[1]);
            memcpy(&api.decompress, &found[2], sizeof found[2]);
            memcpy(&api.is_error, &found[3], sizeof found[3]);
            memcpy(&api.content_size, &found[4], sizeof found[4]);
            memcpy(&api.frame_size, &found[5], sizeof found[5]);
            memcpy(&api.create, &found[0], sizeof found[0]); /* last: set means all are */
        }
    }
    return api.create != NULL ? &api : NULL;
}

/* A zstd body inflated by libzstd into memory of its own (*held, PyMem_Free'd by the caller): 1; 0
 * where there is no libzstd; -1 where the body is not one whole frame of the header's size, or does
 * not inflate to it (the parser reads it again, and says what is wrong with it). */
static int inflate_native(Kernel *k, const unsigned char *body, Py_ssize_t len, uint64_t size, void **held) {
    const zstd_api *z = k->native_inflate ? zstd_lib() : NULL;
    if (z == NULL || (k->dctx == NULL && (k->dctx = z->create()) == NULL))
        return 0;
    if (z->frame_size(body, (size_t)len) != (size_t)len || z->content_size(body, (size_t)len) != size)
        return -1; /* more than one frame, trailing bytes, or a size the header does not give */
    void *out = PyMem_Malloc((size_t)size);
    if (out == NULL)
        return -1;
    size_t got = z->decompress(k->dctx, out, (size_t)size, body, (size_t)len);
    if (z->is_error(got) || got != size) {
        PyMem_Free(out);
        return -1;
    }
    *held = out;
    return 1;
}

/* The payload's events' bytes: the body itself, or inflated (by libzstd into *held, or by the
 * parser's decompressor: a new reference in *owner). NULL where the parser would refuse the body
 * (its error is the parser's). */
static const unsigned char *payload_events(Kernel *k, const unsigned char *body, Py_ssize_t len,
                                           const uint64_t fields[4], int have, PyObject **owner, void **held) {
    uint64_t compression = fields[OTW_PAYLOAD_COMPRESSION_TYPE_FIELD];
    uint64_t uncompressed = fields[OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD];
    int sized = have >> OTW_PAYLOAD_SIZE_FIELD & 1, typed = have >> OTW_PAYLOAD_COMPRESSION_TYPE_FIELD & 1;
    if (!sized || !typed || fields[OTW_PAYLOAD_SIZE_FIELD] != (uint64_t)len)
        return NULL;
    if (compression == PAYLOAD_COMPRESSION_NONE)
        return body;
    /* zstd, with the size it inflates to (0: a size no transaction has, which would not bound it) */
    if (compression != PAYLOAD_COMPRESSION_ZSTD || k->inflate == NULL ||
        !(have >> OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD & 1) || uncompressed == 0 ||
        uncompressed > MAX_PAYLOAD_UNCOMPRESSED)
        return NULL;
    int native = inflate_native(k, body, len, uncompressed, held);
    if (native != 0)
        return native > 0 ? *held : NULL;
    PyObject *view = PyMemoryView_FromMemory((char *)body, len, PyBUF_READ);
    PyObject *out = view != NULL ? PyObject_CallFunction(k->inflate, "On", view, (Py_ssize_t)uncompressed) : NULL;
    Py_XDECREF(view);
    if (out == NULL || !PyBytes_Check(out) || (uint64_t)PyBytes_GET_SIZE(out) != uncompressed) {
        PyErr_Clear(); /* the parser reads it again, and says what is wrong with it */
        Py_XDECREF(out);
        return NULL;
    }
    *owner = out;
    return (const unsigned char *)PyBytes_AS_STRING(out);
}

/* A TRANSACTION_PAYLOAD (binlog_transaction_compression): a whole transaction after its GTID,
 * BEGIN to XID, with no CRC-32 of their own. Each event is handled as any other, at the payload's
 * position, as the parser gives them (the payload's start and end); their rows are numbered on
 * from one event to the next, as they share it. All or nothing: when one of them is Python's (or
 * untaught), whatever the others added is undone and the whole payload is Python's (or untaught). */
static int payload(Kernel *k, const event_t *e, scratch_t *sc) {
    uint64_t fields[4] = {0};
    int have = 0;
    Py_ssize_t at;
    if (k->mariadb || k->staging || !k->in_txn || k->began || k->sql.len ||
        payload_header(e->body, e->n, &at, fields, &have) < 0)
        return PYTHONS;
    PyObject *owner = NULL;
    void *held = NULL;
    Py_ssize_t len = e->n - at;
    const unsigned char *events = payload_events(k, e->body + at, len, fields, have, &owner, &held);
    if (events == NULL)
        return PYTHONS;
    if (owner != NULL || held != NULL)
        len = (Py_ssize_t)fields[OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD]; /* what it inflated to, checked */
    mark_t mark = mark_of(k);
    k->staging = 1, k->nundo = 0, k->payload_rows = k->txn_rows;
    int r = TAKEN;
    for (Py_ssize_t off = 0; r == TAKEN && off < len;) { /* each event moves on by its length, >= a header */
        const unsigned char *ev = events + off;
        event_t inner = {.pos = e->pos, .log_pos = e->log_pos};
        if (len - off < LOG_EVENT_HEADER_LEN || (inner.length = (uint32_t)le(ev + 9, 4)) < LOG_EVENT_HEADER_LEN ||
            inner.length > len - off) {
            r = PYTHONS;
            break;
        }
        inner.timestamp = (uint32_t)le(ev, 4), inner.type = ev[4], inner.server_id = (uint32_t)le(ev + 5, 4);
        inner.body = ev + LOG_EVENT_HEADER_LEN, inner.n = inner.length - LOG_EVENT_HEADER_LEN;
        /* what only comes before or outside a compressed transaction is Python's in one */
        int outside = inner.type == GTID_LOG_EVENT || inner.type == ANONYMOUS_GTID_LOG_EVENT ||
                      inner.type == GTID_EVENT || inner.type == ANNOTATE_ROWS_EVENT ||
                      inner.type == TRANSACTION_PAYLOAD_EVENT;
        r = outside ? PYTHONS : handle(k, &inner, sc);
        off += inner.length;
    }
    if (r == TAKEN && k->in_txn)
        r = PYTHONS; /* it did not commit: the parser and assembler say what it was */
    if (r != TAKEN)
        undo_to(k, &mark);
    k->staging = 0, k->nundo = 0;
    Py_XDECREF(owner);
    PyMem_Free(held);
    return r;
}

/* The event in one packet's payload (after the OK byte); 0 if it is not one the kernel reads. */
static int event_of(const Kernel *k, const unsigned char *ev, Py_ssize_t len, event_t *e) {
    if (len < LOG_EVENT_HEADER_LEN)
        return 0;
    e->timestamp = (uint32_t)le(ev, 4);
    e->type = ev[4];
    e->server_id = (uint32_t)le(ev + 5, 4);
    e->length = (uint32_t)le(ev + 9, 4);
    e->log_pos = (uint32_t)le(ev + 13, 4);
    /* artificial events (log_pos 0: the dump's ROTATE, FORMAT_DESCRIPTION) and lengths that
       disagree are Python's, as are events whose CRC-32 does not check */
    if (e->length != len || e->log_pos == 0 || e->log_pos < e->length)
        return 0;
    Py_ssize_t end = len;
    if (k->checksum) {
        if (len < LOG_EVENT_HEADER_LEN + BINLOG_CHECKSUM_LEN || crc32_of(ev, len) != CRC32_RESIDUE)
            return 0;
        end -= BINLOG_CHECKSUM_LEN;
    }
    e->pos = (long long)e->log_pos - e->length;
    e->body = ev + LOG_EVENT_HEADER_LEN;
    e->n = end - LOG_EVENT_HEADER_LEN;
    return 1;
}

/* -- a run ------------------------------------------------------------------------------------- */

static void run_reset(Kernel *k) {
    outs_clear(k);
    memset(k->event_counts, 0, sizeof k->event_counts);
    if (k->row_counts != NULL)
        memset(k->row_counts, 0, (size_t)k->nrow_counts * sizeof(long long));
    k->bytes = k->commits = 0;
    k->commit_pos = k->commit_server = -1;
    k->last_ts = k->last_pos = -1;
    k->nruns = 0;
    k->ndomains = 0;
    k->nparts = k->npart_counts = 0;
    k->part_open = 0; /* an open transaction's next messages or XID begin a new part */
}

int route_lists(const out_t *items, Py_ssize_t n, int32_t partitions, PyObject *lists[2]) {
    Py_ssize_t *last = PyMem_Malloc((size_t)partitions * sizeof(Py_ssize_t));
    Py_ssize_t *count = PyMem_Calloc((size_t)partitions, sizeof(Py_ssize_t));
    Py_ssize_t ntails = 0, at[2] = {0, 0};
    lists[0] = lists[1] = NULL;
    if (last == NULL || count == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t p = items[i].partition;
        ntails += count[p]++ == 0;
        last[p] = i;
    }
    lists[0] = PyList_New(n - ntails);
    lists[1] = PyList_New(ntails);
    for (Py_ssize_t i = 0; lists[0] && lists[1] && i < n; i++) {
        const out_t *m = &items[i];
        PyObject *key = m->key != NULL ? m->key : Py_None;
        int tail = last[m->partition] == i;
        PyObject *item = tail ? Py_BuildValue("(OOin)", m->value, key, m->partition, count[m->partition])
                              : Py_BuildValue("(OOi)", m->value, key, m->partition);
        if (item == NULL)
            Py_CLEAR(lists[0]);
        else
            PyList_SET_ITEM(lists[tail], at[tail]++, item);
    }
done:
    PyMem_Free(last);
    PyMem_Free(count);
    if (lists[0] && lists[1])
        return 0;
    Py_CLEAR(lists[0]);
    Py_CLEAR(lists[1]);
    return -1;
}

/* list with item appended, whose reference it takes; NULL (list released) if item is NULL (it was not
 * made) or the append fails. */
static PyObject *appended(PyObject *list, PyObject *item) {
    if (item == NULL || PyList_Append(list, item) < 0)
        Py_CLEAR(list);
    Py_XDECREF(item);
    return list;
}

static PyObject *topics_result(const Kernel *k) {
    PyObject *list = PyList_New(0);
    for (Py_ssize_t t = 0; list != NULL && t < k->nouts; t++) {
        const topic_out_t *o = &k->outs[t];
        PyObject *lists[2];
        if (o->len) /* (plain, tails, count) */
            list = appended(list, route_lists(o->items, o->len, o->partitions, lists) < 0
                                      ? NULL
                                      : Py_BuildValue("(n(NNn))", t, lists[0], lists[1], o->len));
    }
    return list;
}

static PyObject *counts_result(const Kernel *k) {
    PyObject *rows = PyList_New(0), *events = PyList_New(0);
    for (Py_ssize_t i = 0; rows && i < k->nrow_counts; i++)
        if (k->row_counts[i])
            rows = appended(rows, Py_BuildValue("(niL)", i / 3, (int)(i % 3), k->row_counts[i]));
    for (int i = 0; events && i < 256; i++)
        if (k->event_counts[i])
            events = appended(events, Py_BuildValue("(iL)", i, k->event_counts[i]));
    if (rows == NULL || events == NULL) {
        Py_XDECREF(rows);
        Py_XDECREF(events);
        return NULL;
    }
    return Py_BuildValue("(NN)", rows, events);
}

static PyObject *gtids_result(const Kernel *k) {
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; list != NULL && i < (k->mariadb ? k->ndomains : k->nruns); i++) {
        if (k->mariadb) {
            const domain_t *d = &k->domains[i];
            list = appended(list, Py_BuildValue("(IIK)", d->domain, d->server, (unsigned long long)d->seq));
        } else {
            const run_t *run = &k->runs[i];
            list = appended(list, Py_BuildValue("(y#KK)", (const char *)run->sid, (Py_ssize_t)16,
                                                (unsigned long long)run->first, (unsigned long long)run->last));
        }
    }
    return list;
}

/* Transaction records: [(gtid, first, committed, [(metric, messages)])], each transaction's part of the run. */
static PyObject *parts_result(const Kernel *k) {
    PyObject *list = PyList_New(k->nparts);
    for (Py_ssize_t i = 0; list != NULL && i < k->nparts; i++) {
        const part_t *p = &k->parts[i];
        Py_ssize_t end = i + 1 < k->nparts ? k->parts[i + 1].counts : k->npart_counts;
        PyObject *counts = PyList_New(end - p->counts), *item = NULL;
        for (Py_ssize_t j = p->counts; counts != NULL && j < end; j++) {
            PyObject *count = Py_BuildValue("(nL)", k->part_counts[j].metric, k->part_counts[j].n);
            if (count == NULL)
                Py_CLEAR(counts);
            else
                PyList_SET_ITEM(counts, j - p->counts, count);
        }
        PyObject *gtid = p->has_gtid ? PyUnicode_DecodeASCII(p->gtid, p->gtid_len, NULL) : Py_NewRef(Py_None);
        if (counts != NULL && gtid != NULL)
            item = Py_BuildValue("(OLOO)", gtid, p->first, p->committed ? Py_True : Py_False, counts);
        Py_XDECREF(counts);
        Py_XDECREF(gtid);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyObject *run_result(Kernel *k, Py_ssize_t consumed, int reason, int sequence) {
    PyObject *items[RUN_FIELD_COUNT];
    items[RUN_CONSUMED] = PyLong_FromSsize_t(consumed);
    items[RUN_REASON] = PyLong_FromLong(reason);
    items[RUN_SEQUENCE] = PyLong_FromLong(sequence);
    items[RUN_TOPICS] = topics_result(k);
    items[RUN_COUNTS] = counts_result(k);
    items[RUN_BYTES] = PyLong_FromLongLong(k->bytes);
    items[RUN_COMMITS] = PyLong_FromLongLong(k->commits);
    items[RUN_COMMIT] = k->commits ? Py_BuildValue("(LLL)", k->commit_pos, k->timestamp, k->commit_server)
                                   : Py_NewRef(Py_None);
    items[RUN_GTIDS] = gtids_result(k);
    items[RUN_LAST_EVENT] = k->last_pos >= 0 ? Py_BuildValue("(LL)", k->last_ts, k->last_pos) : Py_NewRef(Py_None);
    items[RUN_TRANSACTION] = txn_state(k);
    items[RUN_PARTS] = parts_result(k);
    PyObject *result = result_of(RunType, items, RUN_FIELD_COUNT);
    outs_clear(k);
    return result;
}

PyDoc_STRVAR(run_doc,
             "run(buffer, start, end, sequence, ts_ms, timestamp, max_messages)\n--\n\n"
             "Handle the dump's packets in buffer[start:end] until one is Python's, the bytes end inside a\n"
             "packet, or max_messages are made. sequence: the last packet's sequence number; ts_ms: the\n"
             "messages' `ts`; timestamp: the last position's event time. Returns a KernelRun (consumed,\n"
             "reason, sequence, topics, counts (rows, events), bytes, commits, commit, gtids, last_event,\n"
             "transaction, parts):\n"
             "topics [(topic, (plain, tails, count))] as partitioning.route gives them; rows [(metric, kind,\n"
             "count)]; events [(type, count)]; commit (log_pos, timestamp, server_id) of the last XID or None;\n"
             "gtids committed, MySQL [(sid, first, last)] or MariaDB [(domain, server, seq)]; last_event\n"
             "(timestamp, log_pos) or None; transaction as release() gives it; parts: with records() on, each\n"
             "transaction's part of the run, (gtid, first change's position, committed, [(metric, messages)]).");

static PyObject *Kernel_run(Kernel *k, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t start, end, max_messages;
    int sequence;
    long long ts_ms, timestamp;
    if (!PyArg_ParseTuple(args, "y*nniLLn", &buffer, &start, &end, &sequence, &ts_ms, &timestamp, &max_messages))
        return NULL;
    if (start < 0 || end > buffer.len || start > end || sequence < 0 || sequence > 255) {
        PyBuffer_Release(&buffer);
        PyErr_SetString(PyExc_ValueError, "run: a window outside the buffer, or a sequence outside 0-255");
        return NULL;
    }
    run_reset(k);
    k->timestamp = timestamp;
    const unsigned char *s = buffer.buf;
    Py_ssize_t p = start;
    int reason = STOP_NEED_BYTES, failed = 0;
    scratch_t sc = {{0}, {0}, {0}, ts_ms, {0}};
    while (k->configured) {
        if (end - p < 4)
            break;
        Py_ssize_t len = (Py_ssize_t)le(s + p, 3);
        int seq = s[p + 3];
        if (len == MAX_PACKET || seq != ((sequence + 1) & 0xFF) || len < 1) {
            reason = STOP_CONTROL; /* a 16 MiB event, lost bytes, or an empty packet: Python's reader */
            break;
        }
        if (end - p - 4 < len)
            break; /* STOP_NEED_BYTES: the caller reads more (or hands a packet too big to Python) */
        event_t e;
        int r = s[p + 4] == 0 && event_of(k, s + p + 5, len - 1, &e) ? handle(k, &e, &sc) : PYTHONS;
        if (r < 0) {
            failed = 1;
            break;
        }
        if (r == PYTHONS || r == UNTAUGHT) {
            reason = r == UNTAUGHT ? STOP_UNTAUGHT : STOP_CONTROL;
            break;
        }
        k->event_counts[e.type]++;
        k->bytes += len - 1;
        k->last_pos = e.log_pos;
        if (e.timestamp)
            k->last_ts = e.timestamp;
        p += 4 + len;
        sequence = seq;
        if (k->out_total >= max_messages) {
            reason = STOP_FULL;
            break;
        }
    }
    if (!k->configured)
        reason = STOP_CONTROL;
    PyMem_Free(sc.open.data);
    PyMem_Free(sc.first.data);
    PyMem_Free(sc.tail.data);
    PyMem_Free(sc.rest.data);
    PyBuffer_Release(&buffer);
    if (failed) { /* memory: nothing of the run is handed on, and the caller stops */
        outs_clear(k);
        return NULL;
    }
    return run_result(k, p - start, reason, sequence);
}

/* -- the type ----------------------------------------------------------------------------------- */

static PyObject *Kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Kernel *k = (Kernel *)type->tp_alloc(type, 0);
    if (k != NULL)
        txn_reset(k);
    return (PyObject *)k;
}

static void Kernel_dealloc(Kernel *k) {
    outs_clear(k);
    tables_clear(k);
    for (Py_ssize_t t = 0; t < k->nouts; t++)
        PyMem_Free(k->outs[t].items);
    PyMem_Free(k->outs);
    PyMem_Free(k->event_outs);
    PyMem_Free(k->row_counts);
    PyMem_Free(k->runs);
    PyMem_Free(k->undo);
    PyMem_Free(k->parts);
    PyMem_Free(k->part_counts);
    Py_XDECREF(k->inflate);
    if (k->dctx != NULL)
        zstd_lib()->free(k->dctx);
    PyMem_Free(k->file.data);
    PyMem_Free(k->sql.data);
    PyMem_Free(k->mark_before.data);
    PyMem_Free(k->mark_after.data);
    for (int i = 0; i < MAX_BEGINS; i++) {
        PyMem_Free(k->begins[i].data);
        PyMem_Free(k->keeps[i].data);
    }
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static PyMethodDef Kernel_methods[] = {
    {"configure", (PyCFunction)Kernel_configure, METH_VARARGS, configure_doc},
    {"file", (PyCFunction)Kernel_file, METH_VARARGS, file_doc},
    {"table", (PyCFunction)Kernel_table, METH_VARARGS, table_doc},
    {"begin", (PyCFunction)Kernel_begin, METH_VARARGS, begin_doc},
    {"clear", (PyCFunction)Kernel_clear, METH_NOARGS, clear_doc},
    {"inflater", (PyCFunction)Kernel_inflater, METH_VARARGS, inflater_doc},
    {"records", (PyCFunction)Kernel_records, METH_O, records_doc},
    {"release", (PyCFunction)Kernel_release, METH_NOARGS, release_doc},
    {"run", (PyCFunction)Kernel_run, METH_VARARGS, run_doc},
    {NULL, NULL, 0, NULL},
};

PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "connector._transcode.Kernel",
    .tp_doc = "The per-event loop of a streaming session (connector/csrc/kernel.c, connector/lane.py).",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Kernel_new,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_methods = Kernel_methods,
};

static PyStructSequence_Field run_fields[RUN_FIELD_COUNT + 1], transaction_fields[TRANSACTION_FIELD_COUNT + 1];

static PyTypeObject *result_type(const char *name, const char *doc, const char *const *names, int n,
                                 PyStructSequence_Field *fields) {
    for (int i = 0; i < n; i++)
        fields[i] = (PyStructSequence_Field){names[i], NULL};
    fields[n] = (PyStructSequence_Field){NULL, NULL};
    PyStructSequence_Desc desc = {name, doc, fields, n};
    return PyStructSequence_NewType(&desc);
}

int kernel_types(PyObject *module) {
    static const char *const run_names[] = {RUN_FIELD_NAMES}, *const transaction_names[] = {TRANSACTION_FIELD_NAMES};
    if (PyType_Ready(&KernelType) < 0)
        return -1;
    RunType = result_type("connector._transcode.KernelRun", "What a kernel run made (Kernel.run).", run_names,
                          RUN_FIELD_COUNT, run_fields);
    TransactionType = result_type("connector._transcode.KernelTransaction",
                                  "The open transaction a kernel hands over (Kernel.release).", transaction_names,
                                  TRANSACTION_FIELD_COUNT, transaction_fields);
    if (RunType == NULL || TransactionType == NULL)
        return -1;
    return PyModule_AddObjectRef(module, "Kernel", (PyObject *)&KernelType) < 0 ||
                   PyModule_AddObjectRef(module, "KernelRun", (PyObject *)RunType) < 0 ||
                   PyModule_AddObjectRef(module, "KernelTransaction", (PyObject *)TransactionType) < 0
               ? -1
               : 0;
}
