/* Row images of a binlog rows event -> Avro bytes, without Python objects per value.
 *
 * The hot path of the pipeline (connector/avro/transcode.py builds the programs this runs;
 * connector/binlog/rowcodec.py the row walks). It is an accelerator, not a second reference:
 * the generated Python decoders and encoders stay the definition, and every function here
 * returns None ("not this way") for anything it does not handle exactly as they do, so the
 * caller takes the Python path. It never raises on data: a truncated image, a value with no
 * typed form (a day the calendar lacks, a DECIMAL group with too many digits), text that is
 * not strict UTF-8, a NULL in a field that cannot hold one. Every read is bounds-checked
 * against the end of the body.
 *
 * tests/test_transcode.py holds it to the Python path byte for byte, on live MariaDB rows
 * and on arbitrary bytes (equal, or None, never different).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* Column operations of a transcode program; keep in step with connector/avro/transcode.py. */
enum {
    OP_INT = 1,       /* little-endian signed, width 1/2/3/4/8 -> zigzag varint */
    OP_UINT = 2,      /* little-endian unsigned, width 1/2/3/4 -> zigzag varint */
    OP_UINT64 = 3,    /* BIGINT UNSIGNED -> Avro decimal(20,0) bytes */
    OP_FLOAT = 4,     /* 4 bytes, as stored */
    OP_DOUBLE = 5,    /* 8 bytes, as stored */
    OP_DECIMAL = 6,   /* NEWDECIMAL(a, b) -> Avro decimal bytes of the unscaled value */
    OP_DATE = 7,      /* 3 bytes -> days since 1970-01-01, null for zero dates */
    OP_DATETIME2 = 8, /* 5 + frac bytes, fsp a -> microseconds, null for zero dates */
    OP_TIMESTAMP2 = 9,/* 4 + frac bytes, fsp a -> microseconds, null for zero */
    OP_YEAR = 10,     /* 1 byte -> 0 or 1900 + v */
    OP_UTF8 = 11,     /* length-prefixed (a bytes) strict UTF-8 -> Avro string */
    OP_BYTES = 12,    /* length-prefixed (a bytes), zero-padded to b bytes -> Avro bytes */
};

/* One column of a program: seven int32 (see connector/avro/transcode.py). */
typedef struct {
    int32_t op, width, a, b, null_branch, value_branch, pad_;
} column_t;

/* One column of a walk: fixed width, or the size of its length prefix; utf8: strict UTF-8 text. */
typedef struct {
    int32_t width, prefix, utf8;
} walk_t;

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} buf_t;

static int __attribute__((noinline)) buf_grow(buf_t *b, Py_ssize_t more) {
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    char *grown = PyMem_Realloc(b->data, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = grown;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(buf_t *b, Py_ssize_t more) {
    return b->len + more <= b->cap ? 0 : buf_grow(b, more);
}

static inline int buf_put(buf_t *b, const void *src, Py_ssize_t n) {
    if (n == 0) /* a buffer not grown yet has no data: NULL + 0 is undefined */
        return 0;
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int buf_long(buf_t *b, int64_t v) {
    if (buf_reserve(b, 10) < 0)
        return -1;
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    unsigned char *out = (unsigned char *)b->data + b->len;
    int n = 0;
    while (z >= 0x80) {
        out[n++] = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    out[n++] = (unsigned char)z;
    b->len += n;
    return 0;
}

/* Avro decimal bytes: the two's complement of v in (bit_length(|v|) + 8) / 8 bytes, as
 * connector/avro/binary.py writes it (so -128 takes two bytes). */
static int buf_decimal(buf_t *b, __int128 v) {
    unsigned __int128 magnitude = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v : (unsigned __int128)v;
    uint64_t high = (uint64_t)(magnitude >> 64), low = (uint64_t)magnitude;
    int bits = high ? 128 - __builtin_clzll(high) : low ? 64 - __builtin_clzll(low) : 0;
    int n = (bits + 8) / 8;
    if (buf_long(b, n) < 0 || buf_reserve(b, n) < 0)
        return -1;
    unsigned __int128 u = (unsigned __int128)v;
    unsigned char *out = (unsigned char *)b->data + b->len;
    for (int i = n - 1; i >= 0; i--) {
        out[i] = (unsigned char)u;
        u >>= 8;
    }
    b->len += n;
    return 0;
}

/* -- reading ------------------------------------------------------------------------- */

static inline uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Strict UTF-8, as CPython's decoder: no overlongs, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else
            return 0;
        if (i + more >= n)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

static int decimal_width(int precision, int scale) {
    int intg = precision - scale;
    return intg / 9 * 4 + DIG2BYTES[intg % 9] + scale / 9 * 4 + DIG2BYTES[scale % 9];
}

/* NEWDECIMAL (decimal.cc, decimal2bin) as its unscaled value; 0 if a group holds more
 * digits than it should (values.decimal_unscaled_decoder raises NotTyped there). */
static int read_decimal(const unsigned char *p, int precision, int scale, __int128 *out) {
    unsigned char raw[32];
    if (precision > 38 || scale > precision || scale < 0)
        return 0; /* past an __int128: Python's integers take it */
    int width = decimal_width(precision, scale);
    int negative = !(p[0] & 0x80);
    for (int i = 0; i < width; i++)
        raw[i] = negative ? (unsigned char)~p[i] : p[i];
    raw[0] &= 0x7F;
    int intg = precision - scale, at = 0;
    __int128 v = 0;
    int groups[3][2] = {{intg % 9, 0}, {0, 0}, {scale % 9, 0}};
    int full = intg / 9 + scale / 9;
    /* the leading partial group of the integer part, the full groups, the trailing fraction */
    for (int part = 0; part < 3; part++) {
        int count = part == 1 ? full : (groups[part][0] ? 1 : 0);
        int digits = part == 1 ? 9 : groups[part][0];
        for (int k = 0; k < count; k++) {
            int nbytes = DIG2BYTES[digits];
            uint32_t group = (uint32_t)be(raw + at, nbytes);
            at += nbytes;
            if (group >= POW10[digits])
                return 0;
            v = v * POW10[digits] + group;
        }
    }
    *out = negative ? -v : v;
    return 1;
}

/* Days from 1970-01-01 of a valid proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* values._epoch_days: 1 with *days set, 2 for a zero date (null), 0 when Python's date() refuses it. */
static int epoch_days(int64_t year, unsigned month, unsigned day, int64_t *days) {
    static const unsigned LAST[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (!month || !day)
        return 2;
    if (year < 1 || year > 9999 || month > 12)
        return 0;
    unsigned last = LAST[month];
    if (month == 2 && (year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)))
        last = 29;
    if (day > last)
        return 0;
    *days = days_from_civil(year, month, day);
    return 1;
}

/* The fraction of an fsp-digit temporal: micros, or -1 when it prints more digits than fsp. */
static int64_t fraction_micros(const unsigned char *p, int fsp) {
    if (fsp <= 0)
        return 0;
    if (fsp > 6) /* programs are checked at the boundary (program_ok); this keeps POW10 in bounds anyway */
        return -1;
    uint64_t frac = be(p, (fsp + 1) / 2);
    if (fsp % 2)
        frac /= 10;
    if (frac >= POW10[fsp])
        return -1;
    return (int64_t)frac * POW10[6 - fsp];
}

/* -- transcoding ------------------------------------------------------------------------ */

enum { DONE = 1, DECLINE = 0, FAIL = -1 };

typedef struct {
    Py_ssize_t start, end; /* the value's bytes in the image buffer; start < 0: NULL */
} span_t;

/* One value at *pos: its Avro encoding appended to out, or NULL (*null). */
static int value(const column_t *c, const unsigned char *s, Py_ssize_t *pos, Py_ssize_t end, buf_t *out,
                 int *null) {
    Py_ssize_t p = *pos;
    const unsigned char *v = s + p;
    int64_t n64;
    *null = 0;
    if (c->op == OP_UTF8 || c->op == OP_BYTES) {
        if (end - p < c->a)
            return DECLINE;
        Py_ssize_t n = (Py_ssize_t)le(v, c->a);
        if (n > end - p - c->a)
            return DECLINE;
        const unsigned char *text = v + c->a;
        *pos = p + c->a + n;
        if (c->op == OP_UTF8) {
            if (!utf8_valid(text, n))
                return DECLINE;
            if (buf_long(out, n) < 0 || buf_put(out, text, n) < 0)
                return FAIL;
            return DONE;
        }
        Py_ssize_t padded = n < c->b ? c->b : n;
        if (buf_long(out, padded) < 0 || buf_put(out, text, n) < 0 || buf_reserve(out, padded - n) < 0)
            return FAIL;
        memset(out->data + out->len, 0, (size_t)(padded - n));
        out->len += padded - n;
        return DONE;
    }
    if (end - p < c->width)
        return DECLINE;
    *pos = p + c->width;
    switch (c->op) {
    case OP_INT: {
        uint64_t u = le(v, c->width);
        int shift = 64 - 8 * c->width;
        n64 = shift ? (int64_t)(u << shift) >> shift : (int64_t)u;
        return buf_long(out, n64) < 0 ? FAIL : DONE;
    }
    case OP_UINT:
        return buf_long(out, (int64_t)le(v, c->width)) < 0 ? FAIL : DONE;
    case OP_UINT64:
        return buf_decimal(out, (__int128)le(v, 8)) < 0 ? FAIL : DONE;
    case OP_FLOAT:
    case OP_DOUBLE: {
        /* Inf and NaN: their text does not give these bits back; leave them to Python. */
        int exp = c->op == OP_FLOAT ? ((v[3] & 0x7F) << 1 | v[2] >> 7) == 0xFF
                                    : ((v[7] & 0x7F) << 4 | v[6] >> 4) == 0x7FF;
        if (exp)
            return DECLINE;
        return buf_put(out, v, c->width) < 0 ? FAIL : DONE;
    }
    case OP_DECIMAL: {
        __int128 unscaled;
        if (!read_decimal(v, c->a, c->b, &unscaled))
            return DECLINE;
        return buf_decimal(out, unscaled) < 0 ? FAIL : DONE;
    }
    case OP_DATE: {
        uint64_t d = le(v, 3);
        int64_t days;
        int ok = epoch_days((int64_t)(d >> 9), (unsigned)(d >> 5 & 15), (unsigned)(d & 31), &days);
        if (ok == 2) {
            *null = 1;
            return DONE;
        }
        return !ok ? DECLINE : buf_long(out, days) < 0 ? FAIL : DONE;
    }
    case OP_DATETIME2: {
        int64_t packed = (int64_t)be(v, 5) - 0x8000000000LL;
        if (packed < 0)
            return DECLINE;
        int64_t ymd = packed >> 17, hms = packed & 0x1FFFF, ym = ymd >> 5, days;
        int ok = epoch_days(ym / 13, (unsigned)(ym % 13), (unsigned)(ymd & 31), &days);
        if (ok == 2) {
            *null = 1;
            return DONE;
        }
        int64_t micros = fraction_micros(v + 5, c->a);
        if (!ok || micros < 0)
            return DECLINE;
        int64_t seconds = days * 86400 + (hms >> 12) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63);
        return buf_long(out, seconds * 1000000 + micros) < 0 ? FAIL : DONE;
    }
    case OP_TIMESTAMP2: {
        int64_t seconds = (int64_t)be(v, 4);
        if (seconds == 0) {
            *null = 1;
            return DONE;
        }
        int64_t micros = fraction_micros(v + 4, c->a);
        if (micros < 0)
            return DECLINE;
        return buf_long(out, seconds * 1000000 + micros) < 0 ? FAIL : DONE;
    }
    case OP_YEAR:
        return buf_long(out, v[0] ? 1900 + v[0] : 0) < 0 ? FAIL : DONE;
    }
    return DECLINE;
}

/* One row image (null bitmap, then the non-NULL values) as the fields of an Avro record. */
static int image(const column_t *cols, Py_ssize_t ncols, const unsigned char *s, Py_ssize_t *pos, Py_ssize_t end,
                 buf_t *out, span_t *spans) {
    Py_ssize_t nbytes = (ncols + 7) / 8, p = *pos;
    if (end - p < nbytes)
        return DECLINE;
    const unsigned char *bitmap = s + p;
    p += nbytes;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        const column_t *c = &cols[i];
        int null = bitmap[i >> 3] >> (i & 7) & 1;
        Py_ssize_t mark = out->len;
        if (!null) {
            if (c->value_branch >= 0 && buf_long(out, c->value_branch) < 0)
                return FAIL;
            spans[i].start = out->len;
            int r = value(c, s, &p, end, out, &null);
            if (r != DONE)
                return r;
            spans[i].end = out->len;
            if (null)
                out->len = mark; /* a zero date: no value after all */
        }
        if (null) {
            spans[i].start = -1;
            if (c->null_branch < 0)
                return DECLINE; /* the Avro field cannot hold it; Python names the value */
            if (buf_long(out, c->null_branch) < 0)
                return FAIL;
        }
    }
    *pos = p;
    return DONE;
}

typedef struct {
    int32_t column, null_branch, value_branch;
} key_t_;

static int key(const key_t_ *keys, Py_ssize_t nkeys, const buf_t *image, const span_t *spans, buf_t *out) {
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        const span_t *sp = &spans[keys[k].column];
        if (sp->start < 0) {
            if (keys[k].null_branch < 0)
                return DECLINE;
            if (buf_long(out, keys[k].null_branch) < 0)
                return FAIL;
            continue;
        }
        if (keys[k].value_branch >= 0 && buf_long(out, keys[k].value_branch) < 0)
            return FAIL;
        if (buf_put(out, image->data + sp->start, sp->end - sp->start) < 0)
            return FAIL;
    }
    return DONE;
}

typedef struct {
    Py_buffer body, program, keys, first, rest, old_null, old_open, tail, key_prefix;
} args_t;

enum { KIND_WRITE = 0, KIND_UPDATE = 1, KIND_DELETE = 2 };

static PyObject *row_message(args_t *a, Py_ssize_t i, long long base, const buf_t *data, const buf_t *old,
                             PyObject *key_bytes, buf_t *scratch) {
    scratch->len = 0;
    const Py_buffer *open = i == 0 ? &a->first : &a->rest;
    static const char zero = 0;
    if (buf_put(scratch, open->buf, open->len) < 0 || buf_put(scratch, data->data, data->len) < 0 ||
        buf_put(scratch, &zero, 1) < 0)
        return NULL;
    if (old != NULL) {
        if (buf_put(scratch, a->old_open.buf, a->old_open.len) < 0 || buf_put(scratch, old->data, old->len) < 0 ||
            buf_put(scratch, &zero, 1) < 0)
            return NULL;
    } else if (buf_put(scratch, a->old_null.buf, a->old_null.len) < 0)
        return NULL;
    if (buf_put(scratch, a->tail.buf, a->tail.len) < 0 || buf_long(scratch, base + i) < 0)
        return NULL;
    PyObject *value_bytes = PyBytes_FromStringAndSize(scratch->data, scratch->len);
    if (value_bytes == NULL)
        return NULL;
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(value_bytes);
        return NULL;
    }
    Py_INCREF(key_bytes);
    PyTuple_SET_ITEM(pair, 0, key_bytes);
    PyTuple_SET_ITEM(pair, 1, value_bytes);
    return pair;
}

static PyObject *key_object(args_t *a, const key_t_ *keys, Py_ssize_t nkeys, const buf_t *img, const span_t *spans,
                            const buf_t *before, const span_t *before_spans, buf_t *kb, buf_t *kb2, int *r) {
    if (nkeys == 0) {
        *r = DONE;
        Py_RETURN_NONE;
    }
    kb->len = 0;
    if ((*r = buf_put(kb, a->key_prefix.buf, a->key_prefix.len) < 0 ? FAIL : DONE) != DONE ||
        (*r = key(keys, nkeys, img, spans, kb)) != DONE)
        return NULL;
    if (before != NULL) { /* an UPDATE that changes its key is a DELETE and an INSERT: Python's */
        kb2->len = 0;
        if ((*r = buf_put(kb2, a->key_prefix.buf, a->key_prefix.len) < 0 ? FAIL : DONE) != DONE ||
            (*r = key(keys, nkeys, before, before_spans, kb2)) != DONE)
            return NULL;
        if (kb->len != kb2->len || memcmp(kb->data, kb2->data, (size_t)kb->len) != 0) {
            *r = DECLINE;
            return NULL;
        }
    }
    PyObject *k = PyBytes_FromStringAndSize(kb->data, kb->len);
    if (k == NULL)
        *r = FAIL;
    return k;
}

/* run()'s buffers, kept between calls up to KEPT_MAX bytes each (a statement's text can make
 * one event's first row hundreds of KB). The GIL serialises calls; kept_in_use guards the
 * one way back in: a finalizer run by an allocation inside run() that transcodes again. */
#define KEPT_MAX (1 << 20)
static buf_t kept[5];
static int kept_in_use;

static PyObject *run(args_t *a, int kind, long long base) {
    const column_t *cols = (const column_t *)a->program.buf;
    Py_ssize_t ncols = a->program.len / (Py_ssize_t)sizeof(column_t);
    const key_t_ *keys = (const key_t_ *)a->keys.buf;
    Py_ssize_t nkeys = a->keys.len / (Py_ssize_t)sizeof(key_t_);
    const unsigned char *s = a->body.buf;
    Py_ssize_t pos = 0, end = a->body.len;
    for (Py_ssize_t k = 0; k < nkeys; k++)
        if (keys[k].column < 0 || keys[k].column >= ncols) {
            PyErr_SetString(PyExc_ValueError, "key column outside the program");
            return NULL;
        }
    buf_t first = {0}, second = {0}, scratch = {0}, kb = {0}, kb2 = {0};
    int took = !kept_in_use;
    if (took) { /* the buffers of the last call: no malloc, no fresh pages, per event */
        kept_in_use = 1;
        first = kept[0], second = kept[1], scratch = kept[2], kb = kept[3], kb2 = kept[4];
    }
    span_t *spans = PyMem_Calloc((size_t)(ncols ? ncols : 1) * 2, sizeof(span_t));
    PyObject *out = PyList_New(0), *result = NULL;
    int r = DONE;
    if (spans == NULL || out == NULL) {
        if (spans == NULL)
            PyErr_NoMemory();
        goto finish;
    }
    for (Py_ssize_t i = 0; pos < end; i++) {
        first.len = second.len = 0;
        if ((r = image(cols, ncols, s, &pos, end, &first, spans)) != DONE)
            goto finish;
        if (kind == KIND_UPDATE && (r = image(cols, ncols, s, &pos, end, &second, spans + ncols)) != DONE)
            goto finish;
        /* WRITE and DELETE: the one image is the data; UPDATE: the after image, the before as old */
        const buf_t *data = kind == KIND_UPDATE ? &second : &first;
        const span_t *data_spans = kind == KIND_UPDATE ? spans + ncols : spans;
        PyObject *k = key_object(a, keys, nkeys, data, data_spans, kind == KIND_UPDATE ? &first : NULL, spans, &kb,
                                 &kb2, &r);
        if (k == NULL)
            goto finish;
        PyObject *pair = row_message(a, i, base, data, kind == KIND_UPDATE ? &first : NULL, k, &scratch);
        Py_DECREF(k);
        if (pair == NULL || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            r = FAIL;
            goto finish;
        }
        Py_DECREF(pair);
    }
    result = out;
    out = NULL;
finish:
    if (r == DECLINE && result == NULL && !PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
    Py_XDECREF(out);
    PyMem_Free(spans);
    buf_t *mine[] = {&first, &second, &scratch, &kb, &kb2};
    for (int i = 0; i < 5; i++) {
        if (took && mine[i]->cap <= KEPT_MAX) {
            mine[i]->len = 0;
            kept[i] = *mine[i];
        } else {
            PyMem_Free(mine[i]->data);
            if (took)
                kept[i] = (buf_t){0};
        }
    }
    if (took)
        kept_in_use = 0;
    return result;
}

PyDoc_STRVAR(transcode_doc,
             "transcode(body, program, kind, keys, key_prefix, first, rest, old_null, old_open, tail, base)\n"
             "--\n\n"
             "Every row of a rows event's images as (key or None, value) Avro bytes; None to decline.\n"
             "See connector/avro/transcode.py for the arguments.");

/* The most a BINARY(n) value is padded to: n < 256 as MySQL logs it (its metadata keeps up to 10 bits). */
#define MAX_PAD 0xFFFF

/* A column reads exactly the bytes its op says (value() trusts the width for the op's own reads):
   the integer widths MySQL has, a DECIMAL of its precision and scale (at most 38 digits: an
   __int128), a fraction of at most 6 digits, a length prefix of 1-4 bytes. */
static int column_ok(const column_t *c) {
    switch (c->op) {
    case OP_INT:
        return c->width == 1 || c->width == 2 || c->width == 3 || c->width == 4 || c->width == 8;
    case OP_UINT:
        return c->width >= 1 && c->width <= 4;
    case OP_UINT64:
    case OP_DOUBLE:
        return c->width == 8;
    case OP_FLOAT:
        return c->width == 4;
    case OP_DECIMAL:
        return c->a >= 1 && c->a <= 38 && c->b >= 0 && c->b <= c->a && c->width == decimal_width(c->a, c->b);
    case OP_DATE:
        return c->width == 3;
    case OP_DATETIME2:
        return c->a >= 0 && c->a <= 6 && c->width == 5 + (c->a + 1) / 2;
    case OP_TIMESTAMP2:
        return c->a >= 0 && c->a <= 6 && c->width == 4 + (c->a + 1) / 2;
    case OP_YEAR:
        return c->width == 1;
    case OP_UTF8:
        return c->width == 0 && c->a >= 1 && c->a <= 4 && c->b == 0;
    case OP_BYTES:
        return c->width == 0 && c->a >= 1 && c->a <= 4 && c->b >= 0 && c->b <= MAX_PAD;
    }
    return 0;
}

/* Every column of a program can be walked (column_ok), and there is at least one, since a row
   of none takes no bytes and a walk over it would never move. */
static int program_ok(const column_t *cols, Py_ssize_t ncols) {
    if (ncols == 0)
        return 0;
    for (Py_ssize_t i = 0; i < ncols; i++)
        if (!column_ok(&cols[i]))
            return 0;
    return 1;
}

static PyObject *transcode(PyObject *self, PyObject *args) {
    args_t a;
    int kind;
    long long base;
    memset(&a, 0, sizeof a);
    if (!PyArg_ParseTuple(args, "y*y*iy*y*y*y*y*y*y*L", &a.body, &a.program, &kind, &a.keys, &a.key_prefix, &a.first,
                          &a.rest, &a.old_null, &a.old_open, &a.tail, &base))
        return NULL;
    PyObject *result = NULL;
    if (a.program.len % (Py_ssize_t)sizeof(column_t) || a.keys.len % (Py_ssize_t)sizeof(key_t_) || kind < 0 ||
        kind > 2 || !program_ok((const column_t *)a.program.buf, a.program.len / (Py_ssize_t)sizeof(column_t))) {
        PyErr_SetString(PyExc_ValueError, "malformed transcode program");
    } else if (base < 0 || base > LLONG_MAX - a.body.len) { /* a row's number, base + i, must not overflow */
        PyErr_SetString(PyExc_ValueError, "row number base out of range");
    } else {
        result = run(&a, kind, base);
    }
    Py_buffer *all[] = {&a.body, &a.program, &a.keys, &a.key_prefix, &a.first, &a.rest, &a.old_null, &a.old_open, &a.tail};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        PyBuffer_Release(all[i]);
    return result;
}

/* -- walking ---------------------------------------------------------------------------- */

PyDoc_STRVAR(count_rows_doc,
             "count_rows(body, layout, images)\n--\n\n"
             "The number of rows in a rows event's images, or -1 if they do not fit the layout\n"
             "(int32 triples: fixed width, or 0 and the length prefix's size; 1 where the value must be\n"
             "strict UTF-8). `images`: 1, or 2 for UPDATE.");

/* A column of a walk: a positive fixed width, or a length prefix of 1-4 bytes (rowcodec.walk_layout). */
static int walk_ok(const walk_t *c) {
    int fixed = c->width > 0 && c->prefix == 0 && c->utf8 == 0;
    int prefixed = c->width == 0 && c->prefix >= 1 && c->prefix <= 4 && (c->utf8 == 0 || c->utf8 == 1);
    return fixed || prefixed;
}

static PyObject *count_rows(PyObject *self, PyObject *args) {
    Py_buffer body, layout;
    int images;
    if (!PyArg_ParseTuple(args, "y*y*i", &body, &layout, &images))
        return NULL;
    const walk_t *cols = layout.buf;
    Py_ssize_t ncols = layout.len / (Py_ssize_t)sizeof(walk_t), nbytes = (ncols + 7) / 8;
    const unsigned char *s = body.buf;
    Py_ssize_t p = 0, end = body.len, rows = 0;
    int ok = layout.len % (Py_ssize_t)sizeof(walk_t) == 0 && (images == 1 || images == 2);
    for (Py_ssize_t i = 0; ok && i < ncols; i++) /* every step moves on: a fixed width or a 1-4 byte prefix */
        ok = walk_ok(&cols[i]);
    if (ncols == 0 && end > 0)
        ok = 0; /* images of no columns take no bytes: these bytes fit nothing */
    while (ok && p < end) {
        for (int img = 0; ok && img < images; img++) {
            if (end - p < nbytes) {
                ok = 0;
                break;
            }
            const unsigned char *bitmap = s + p;
            p += nbytes;
            for (Py_ssize_t i = 0; i < ncols; i++) {
                if (bitmap[i >> 3] >> (i & 7) & 1)
                    continue;
                Py_ssize_t n = cols[i].width;
                if (cols[i].prefix) {
                    if (cols[i].prefix > 4 || end - p < cols[i].prefix) {
                        ok = 0;
                        break;
                    }
                    n = (Py_ssize_t)le(s + p, cols[i].prefix);
                    p += cols[i].prefix;
                } else if (n <= 0) {
                    ok = 0;
                    break;
                }
                if (n > end - p || (cols[i].utf8 && !utf8_valid(s + p, n))) {
                    ok = 0;
                    break;
                }
                p += n;
            }
        }
        rows++;
    }
    PyBuffer_Release(&body);
    PyBuffer_Release(&layout);
    return PyLong_FromSsize_t(ok ? rows : -1);
}


/* -- routing ----------------------------------------------------------------------------- */

/* Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747b28c), unsigned. */
static uint32_t murmur2(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t whole = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)le(data + i, 4);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* The partition of each message, or -1 after setting an exception. */
static int route_partitions(PyObject *messages, Py_ssize_t partitions, Py_ssize_t fixed, Py_ssize_t skip,
                            Py_ssize_t *part) {
    Py_ssize_t n = PyList_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(messages, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(item, 1))) {
            PyErr_Format(PyExc_TypeError, "message %zd is not a (key, value) pair of bytes", i);
            return -1;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 0);
        if (fixed >= 0) {
            part[i] = fixed;
        } else if (PyBytes_Check(key)) {
            Py_ssize_t size = PyBytes_GET_SIZE(key), from = skip < size ? skip : size; /* the framing is not hashed */
            part[i] = (Py_ssize_t)((murmur2((const unsigned char *)PyBytes_AS_STRING(key) + from, size - from) &
                                    0x7fffffffu) % (uint32_t)partitions);
        } else {
            PyErr_Format(PyExc_ValueError, "message %zd has no key and no partition", i);
            return -1;
        }
    }
    return 0;
}

static PyObject *route_lists(PyObject *messages, const Py_ssize_t *part, const Py_ssize_t *last, const Py_ssize_t *count,
                             Py_ssize_t ntails) {
    Py_ssize_t n = PyList_GET_SIZE(messages), at_plain = 0, at_tail = 0;
    PyObject *plain = PyList_New(n - ntails), *tails = PyList_New(ntails);
    for (Py_ssize_t i = 0; plain && tails && i < n; i++) {
        PyObject *item = PyList_GET_ITEM(messages, i);
        PyObject *key = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
        int tail = last[part[i]] == i;
        PyObject *out = tail ? Py_BuildValue("(OOnn)", value, key, part[i], count[part[i]])
                             : Py_BuildValue("(OOn)", value, key, part[i]);
        if (out == NULL) {
            Py_CLEAR(plain);
            break;
        }
        if (tail)
            PyList_SET_ITEM(tails, at_tail++, out);
        else
            PyList_SET_ITEM(plain, at_plain++, out);
    }
    PyObject *result = plain && tails ? PyTuple_Pack(2, plain, tails) : NULL;
    Py_XDECREF(plain);
    Py_XDECREF(tails);
    return result;
}

PyDoc_STRVAR(route_doc,
             "route(messages, partitions, fixed, skip)\n--\n\n"
             "Where (key, value) messages go: (plain, tails). Every message's partition is `fixed`, or,\n"
             "if that is -1, the murmur2 of its key after the first `skip` bytes (the key's framing),\n"
             "modulo `partitions` (as Kafka's Java clients pick it for those bytes).\n"
             "tails: (value, key, partition, count) for the last message of each partition, count being\n"
             "how many of the messages went there; plain: (value, key, partition) for the others, in order.");

static PyObject *route(PyObject *self, PyObject *args) {
    PyObject *messages, *result = NULL;
    Py_ssize_t partitions, fixed, skip;
    if (!PyArg_ParseTuple(args, "O!nnn", &PyList_Type, &messages, &partitions, &fixed, &skip))
        return NULL;
    if (partitions < 1 || partitions > INT32_MAX || fixed < -1 || fixed >= partitions || skip < 0) {
        PyErr_Format(PyExc_ValueError, "partition %zd of %zd partitions, skip %zd", fixed, partitions, skip);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(messages), ntails = 0;
    Py_ssize_t *part = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    Py_ssize_t *last = PyMem_Malloc((size_t)partitions * sizeof(Py_ssize_t));
    Py_ssize_t *count = PyMem_Calloc((size_t)partitions, sizeof(Py_ssize_t));
    if (!part || !last || !count) {
        PyErr_NoMemory();
    } else if (route_partitions(messages, partitions, fixed, skip, part) == 0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            ntails += count[part[i]]++ == 0;
            last[part[i]] = i;
        }
        result = route_lists(messages, part, last, count, ntails);
    }
    PyMem_Free(part);
    PyMem_Free(last);
    PyMem_Free(count);
    return result;
}

static PyMethodDef methods[] = {
    {"transcode", transcode, METH_VARARGS, transcode_doc},
    {"count_rows", count_rows, METH_VARARGS, count_rows_doc},
    {"route", route, METH_VARARGS, route_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "connector._transcode",
    .m_doc = "Compiled row-image transcoding (see connector/avro/transcode.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__transcode(void) { return PyModule_Create(&module); }
