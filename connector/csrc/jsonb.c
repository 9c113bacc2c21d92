/* MySQL's binary JSON (sql-common/json_binary.cc) as the text MySQL prints of it: what
 * connector/binlog/jsonb.py's to_text(parse(doc)) gives, byte for byte, or DECLINE where this
 * code does not give it. Declined, and left to the Python path: an opaque value (a DECIMAL or a
 * temporal value made by an SQL expression, or any other field type), a key or string that is
 * not UTF-8, an object whose keys are not in binary JSON's order (Python sorts and keeps the last
 * of a repeated key), inf or nan, any malformed byte, and a text longer than JSON_GROWTH times the
 * document: value offsets may point at one value from many places, so a few bytes could name a
 * tree of any size, and a legitimate document's text is never more than about six times its
 * bytes (a control character in a string: one byte, six characters).
 *
 * Every loop runs over entries whose bytes were checked to be in the document before it starts,
 * and nesting stops at MySQL's own depth limit: no loop can fail to move on bad bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "native.h"

enum {
    JSONB_SMALL_OBJECT = 0x00,
    JSONB_LARGE_OBJECT = 0x01,
    JSONB_SMALL_ARRAY = 0x02,
    JSONB_LARGE_ARRAY = 0x03,
    JSONB_LITERAL = 0x04,
    JSONB_INT16 = 0x05,
    JSONB_UINT16 = 0x06,
    JSONB_INT32 = 0x07,
    JSONB_UINT32 = 0x08,
    JSONB_INT64 = 0x09,
    JSONB_UINT64 = 0x0A,
    JSONB_DOUBLE = 0x0B,
    JSONB_STRING = 0x0C,
};

#define JSON_MAX_DEPTH 100 /* JSON_DOCUMENT_MAX_DEPTH: jsonb.MAX_DEPTH */
#define JSON_GROWTH 8

typedef struct {
    const unsigned char *doc;
    buf_t *out;
    char *at;         /* where the text goes on in out's data */
    char *stop;       /* the end of the room reserved for it: out's capacity, never past `limit` */
    Py_ssize_t limit; /* the length of out past which the text is declined */
} json_t;

static int value_at(json_t *j, int kind, Py_ssize_t pos, Py_ssize_t end, int depth);

/* Where the text goes on and where its room ends, from out's length and capacity (after out grew). */
static void follow(json_t *j) {
    buf_t *b = j->out;
    j->at = b->data + b->len;
    j->stop = b->data + (b->cap < j->limit ? b->cap : j->limit);
}

/* Room for n more bytes (out grown as buf_grow grows it), or DECLINE where they would take the
 * text past its limit. The limit's one check: no write passes `stop`, so a text that would pass
 * the limit meets it here. */
static int make_room(json_t *j, Py_ssize_t n) {
    buf_t *b = j->out;
    Py_ssize_t len = j->at - b->data;
    if (n > j->limit - len)
        return DECLINE;
    b->len = len;
    if (buf_reserve(b, n) < 0)
        return FAIL;
    follow(j);
    return DONE;
}

static inline __attribute__((always_inline)) int put(json_t *j, const char *s, Py_ssize_t n) {
    int r;
    if (j->stop - j->at < n && (r = make_room(j, n)) != DONE)
        return r;
    memcpy(j->at, s, (size_t)n);
    j->at += n;
    return DONE;
}

/* A string or key: quoted and escaped as jsonb.quote does (put_escaped's escapes are the same).
 * Most are printable ASCII, which is UTF-8 and needs no escape: copied as they are checked. */
static int quoted(json_t *j, const unsigned char *s, Py_ssize_t n) {
    int r;
    if (j->stop - j->at < n + 2 && (r = make_room(j, n + 2)) != DONE)
        return r; /* the text, escaped or not, takes at least n + 2 bytes */
    unsigned char *d = (unsigned char *)j->at + 1;
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x80 || !plain(c))
            break;
        d[i] = c;
    }
    if (i == n) {
        d[-1] = '"', d[n] = '"';
        j->at += n + 2;
        return DONE;
    }
    if (!utf8_valid(s, n))
        return DECLINE;
    buf_t *b = j->out;
    b->len = j->at - b->data;
    if (buf_put(b, "\"", 1) < 0 || put_escaped(b, s, n) < 0 || buf_put(b, "\"", 1) < 0)
        return FAIL;
    if (b->len > j->limit)
        return DECLINE;
    follow(j);
    return DONE;
}

static int integer(json_t *j, int kind, Py_ssize_t pos, Py_ssize_t end) {
    int size = kind <= JSONB_UINT16 ? 2 : kind <= JSONB_UINT32 ? 4 : 8;
    if (end - pos < size)
        return DECLINE;
    uint64_t u = le(j->doc + pos, size);
    int negative = 0;
    if (kind == JSONB_INT16 || kind == JSONB_INT32 || kind == JSONB_INT64) {
        int64_t v = signed_of(u, size);
        negative = v < 0;
        u = negative ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; /* INT64_MIN's magnitude too */
    }
    char text[21], *at = digits_before(text + sizeof text, u); /* 20 digits and a sign */
    if (negative)
        *--at = '-';
    return put(j, at, text + sizeof text - at);
}

/* The shortest decimal that reads back as d, found exactly (integer arithmetic, no rounding):
 * the first k in 0..17 whose nearest k-place decimal m / 10^k is nearer d than half the gap to
 * either neighbouring double is the shortest, and, being the nearest, repr's choice too. Taken for
 * normal doubles below 2^52 and at least 2^-64 with no tie (an exact half place within half the
 * gap, or a distance exactly half the gap) and away from a power of two (whose gap below is half
 * the gap above); 0 for the others, which PyOS_double_to_string prints. An exact half place
 * farther than half the gap (1.5 at k = 0) only says k places are too few. d = M / 2^s, so
 * d * 10^k = M * 10^k / 2^s and every quantity below is a 128-bit integer scaled by 2^s. */
static int shortest_exactly(double d, char *digits, int *count, int *point) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    int exponent = (int)(bits >> 52 & 0x7FF);
    uint64_t fraction = bits & ((UINT64_C(1) << 52) - 1);
    int s = 1075 - exponent;
    if (exponent == 0 || fraction == 0 || s < 1 || s > 116)
        return 0;
    unsigned __int128 M = fraction | UINT64_C(1) << 52, one = (unsigned __int128)1 << s, P = 1;
    for (int k = 0; k <= 17; k++, P *= 10) {
        unsigned __int128 N = M * P, m = N >> s, rest = N & (one - 1), distance = rest;
        if (2 * rest == one && one <= P)
            return 0; /* m and m + 1 both read back as d: left to repr */
        if (2 * rest > one)
            m += 1, distance = one - rest;
        if (2 * distance == P)
            return 0;
        if (2 * distance > P)
            continue;
        if (m >= (unsigned __int128)100000000000000000) /* 18 digits: past repr's 17 */
            return 0;
        char text[20], *at = digits_before(text + sizeof text, (uint64_t)m);
        *count = (int)(text + sizeof text - at);
        *point = *count - k;
        memcpy(digits, at, (size_t)*count);
        return 1;
    }
    return 0;
}

/* repr's digits of d (a finite, non-zero double's magnitude): the exact way when it applies,
 * else from PyOS_double_to_string; *point: where the decimal point falls after the first digit
 * (0.001: digits 1, point -2). -1 if there is no memory for the digits. */
static int shortest(double d, char digits[40], int *count, int *point) {
    if (shortest_exactly(d, digits, count, point))
        return 0;
    char *repr = PyOS_double_to_string(d, 'r', 0, 0, NULL);
    if (repr == NULL)
        return -1;
    int after_dot = 0;
    const char *s = repr;
    *count = *point = 0;
    for (; *s != '\0' && *s != 'e'; s++) {
        if (*s == '.') {
            after_dot = 1;
        } else if (*count < 40) {
            digits[(*count)++] = *s;
            *point += !after_dot;
        }
    }
    *point += *s == 'e' ? atoi(s + 1) : 0;
    PyMem_Free(repr);
    return 0;
}

/* jsonb.double_text: the shortest digits that read back as the double (repr's), in plain
 * notation where the decimal point falls within 15 places, or where the number has a fraction;
 * else as 2.5e15, 1e-16; plain numbers with no fraction end in ".0". */
static int floating(json_t *j, Py_ssize_t pos, Py_ssize_t end) {
    if (end - pos < 8)
        return DECLINE;
    uint64_t bits = le(j->doc + pos, 8);
    double d;
    memcpy(&d, &bits, sizeof d);
    if (!isfinite(d))
        return DECLINE; /* no JSON value: the Python path writes what repr does */
    if (d == 0)
        return signbit(d) ? put(j, "-0.0", 4) : put(j, "0.0", 3);
    char digits[40];
    int count, point, negative = d < 0;
    if (shortest(fabs(d), digits, &count, &point) < 0)
        return FAIL;
    int first = 0;
    while (first < count - 1 && digits[first] == '0') /* 0.001: digits 1, point -2 */
        first++, point--;
    while (count > first + 1 && digits[count - 1] == '0')
        count--;
    const char *ds = digits + first;
    int nd = count - first; /* at most 17: repr's digits */
    char text[64];
    int n = 0;
    if (negative)
        text[n++] = '-';
    if (point >= -14 && (point <= 15 || point < nd)) {
        if (point <= 0) { /* 0.000ddd */
            text[n++] = '0', text[n++] = '.';
            for (int k = 0; k < -point; k++)
                text[n++] = '0';
            memcpy(text + n, ds, (size_t)nd), n += nd;
        } else if (point >= nd) { /* ddd000.0 */
            memcpy(text + n, ds, (size_t)nd), n += nd;
            for (int k = 0; k < point - nd; k++)
                text[n++] = '0';
            text[n++] = '.', text[n++] = '0';
        } else { /* dd.ddd */
            memcpy(text + n, ds, (size_t)point), n += point;
            text[n++] = '.';
            memcpy(text + n, ds + point, (size_t)(nd - point)), n += nd - point;
        }
    } else { /* d.ddde-16 */
        text[n++] = ds[0];
        if (nd > 1) {
            text[n++] = '.';
            memcpy(text + n, ds + 1, (size_t)(nd - 1)), n += nd - 1;
        }
        n += snprintf(text + n, sizeof text - (size_t)n, "e%d", point - 1);
    }
    return n > 0 && n < (int)sizeof text ? put(j, text, n) : DECLINE;
}

/* A string's or an opaque value's length: 7 bits a byte, low first, at most 5 bytes. */
static int varlen(const unsigned char *doc, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t *length) {
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (*pos >= end)
            return DECLINE;
        unsigned char c = doc[(*pos)++];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (!(c & 0x80)) {
            *length = (Py_ssize_t)v;
            return DONE;
        }
    }
    return DECLINE;
}

static int string(json_t *j, Py_ssize_t pos, Py_ssize_t end) {
    Py_ssize_t n;
    if (varlen(j->doc, &pos, end, &n) != DONE || n > end - pos)
        return DECLINE;
    return quoted(j, j->doc + pos, n);
}

/* A container's count, size or offset: 2 bytes in a small one, 4 in a large one. Each width is a
 * constant in its branch, so the compiler reads it with one load (le's loop with a width only known
 * at run time was a sixth of a document's time). */
static inline uint64_t field(const unsigned char *p, int large) {
    return large ? le(p, 4) : le(p, 2);
}

/* An object's or array's entries (jsonb._container): the header (count, size), the key entries
 * (offset, length) of an object, then one value entry per element: its type and either the value
 * itself (literals, 16-bit integers, and 32-bit ones in a large container) or its offset. */
static int container(json_t *j, int kind, Py_ssize_t pos, Py_ssize_t end, int depth) {
    int large = kind == JSONB_LARGE_OBJECT || kind == JSONB_LARGE_ARRAY;
    int object = kind == JSONB_SMALL_OBJECT || kind == JSONB_LARGE_OBJECT;
    Py_ssize_t width = large ? 4 : 2, entry = 1 + width, key_entry = object ? width + 2 : 0;
    if (end - pos < 2 * width)
        return DECLINE;
    const unsigned char *doc = j->doc;
    uint64_t count = field(doc + pos, large), size = field(doc + pos + width, large);
    Py_ssize_t at = pos + 2 * width;
    if (size > (uint64_t)(end - pos) || count * (uint64_t)(entry + key_entry) > (uint64_t)(end - at))
        return DECLINE;
    Py_ssize_t stop = pos + (Py_ssize_t)size, values = at + (Py_ssize_t)count * key_entry;
    const unsigned char *last_key = NULL;
    uint64_t last_length = 0;
    int r;
    if ((r = put(j, object ? "{" : "[", 1)) != DONE)
        return r;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        if (i > 0 && (r = put(j, ", ", 2)) != DONE)
            return r;
        if (object) {
            const unsigned char *k = doc + at + i * key_entry;
            uint64_t offset = field(k, large), length = le(k + width, 2);
            if (offset + length > size)
                return DECLINE;
            const unsigned char *key = doc + pos + offset;
            if (last_key != NULL && (length < last_length ||
                                     (length == last_length && memcmp(last_key, key, (size_t)length) >= 0)))
                return DECLINE; /* not binary JSON's order (by length, then bytes), or repeated */
            last_key = key, last_length = length;
            if ((r = quoted(j, key, (Py_ssize_t)length)) != DONE)
                return r;
            if ((r = put(j, ": ", 2)) != DONE)
                return r;
        }
        Py_ssize_t e = values + i * entry;
        int type = doc[e];
        int inlined = type == JSONB_LITERAL || type == JSONB_INT16 || type == JSONB_UINT16 ||
                      (large && (type == JSONB_INT32 || type == JSONB_UINT32));
        if (inlined) {
            r = value_at(j, type, e + 1, e + 1 + width, depth + 1);
        } else {
            uint64_t offset = field(doc + e + 1, large);
            if (offset >= size)
                return DECLINE;
            r = value_at(j, type, pos + (Py_ssize_t)offset, stop, depth + 1);
        }
        if (r != DONE)
            return r;
    }
    return put(j, object ? "}" : "]", 1);
}

static int value_at(json_t *j, int kind, Py_ssize_t pos, Py_ssize_t end, int depth) {
    if (depth > JSON_MAX_DEPTH)
        return DECLINE;
    switch (kind) {
    case JSONB_SMALL_OBJECT:
    case JSONB_LARGE_OBJECT:
    case JSONB_SMALL_ARRAY:
    case JSONB_LARGE_ARRAY:
        return container(j, kind, pos, end, depth);
    case JSONB_LITERAL:
        if (pos >= end)
            return DECLINE;
        switch (j->doc[pos]) {
        case 0x00:
            return put(j, "null", 4);
        case 0x01:
            return put(j, "true", 4);
        case 0x02:
            return put(j, "false", 5);
        }
        return DECLINE;
    case JSONB_INT16:
    case JSONB_UINT16:
    case JSONB_INT32:
    case JSONB_UINT32:
    case JSONB_INT64:
    case JSONB_UINT64:
        return integer(j, kind, pos, end);
    case JSONB_DOUBLE:
        return floating(j, pos, end);
    case JSONB_STRING:
        return string(j, pos, end);
    }
    return DECLINE; /* opaque (0x0f) or unknown */
}

int jsonb_text(const unsigned char *doc, Py_ssize_t n, buf_t *out) {
    if (n == 0) /* an empty document is the null literal */
        return buf_put(out, "null", 4) == 0 ? DONE : FAIL;
    /* room for a text twice the document's size at first: most are less */
    Py_ssize_t start = out->len, limit = start + JSON_GROWTH * n + 64;
    if (buf_reserve(out, 2 * n + 64) < 0)
        return FAIL;
    json_t j = {doc, out, NULL, NULL, limit};
    follow(&j);
    int r = value_at(&j, doc[0], 1, n, 0);
    out->len = r == DONE ? j.at - out->data : start;
    return r;
}

int jsonb_ok(const unsigned char *doc, Py_ssize_t n) {
    buf_t text = {NULL, 0, 0}; /* the text made and dropped: the Python path decodes what is taken */
    int r = jsonb_text(doc, n, &text);
    PyMem_Free(text.data);
    if (r == FAIL) /* no memory: not taken, and Python's decoding meets it too */
        PyErr_Clear();
    return r == DONE;
}
