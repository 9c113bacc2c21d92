/* What the compiled module's files share (connector/_transcode.c is the module; see
 * connector/native.py for what Python calls). Constants and record layouts come from spec.h,
 * which connector/native_spec.py writes: nothing here restates a Python value by hand. */
#ifndef SLUICE_NATIVE_H
#define SLUICE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "spec.h"

#define SL_INTERNAL __attribute__((visibility("hidden")))

/* The flags by which a [[kafka.columns]] rule shapes a column (native_spec.COLUMN_FLAGS). */
#define COL_SHAPED (COL_DROP | COL_MASK | COL_HASH)

/* -- growable byte buffers (PyMem) ----------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} buf_t;

SL_INTERNAL int buf_grow(buf_t *b, Py_ssize_t more);

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

/* An Avro long: zigzag, then base-128 varint; its 1-10 bytes written to out, their count returned. */
static inline int long_bytes(int64_t v, unsigned char *out) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 0;
    while (z >= 0x80) {
        out[n++] = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    out[n++] = (unsigned char)z;
    return n;
}

static inline int buf_long(buf_t *b, int64_t v) {
    if (buf_reserve(b, 10) < 0)
        return -1;
    b->len += long_bytes(v, (unsigned char *)b->data + b->len);
    return 0;
}

/* u's decimal digits (at most 20), written backwards to end at `end`: where they start. */
static inline char *digits_before(char *end, uint64_t u) {
    do {
        *--end = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    return end;
}

/* v's decimal text (a minus sign, then its digits) appended to b: digits_before, not printf, on
 * the per-row path (printf's cost showed in the kernel's single-row profile, for a GTID's number). */
static inline int buf_int_text(buf_t *b, int64_t v) {
    char text[21], *at = digits_before(text + sizeof text, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
    if (v < 0)
        *--at = '-';
    return buf_put(b, at, text + sizeof text - at);
}

/* u's decimal digits, at least `width` of them (zero-padded, as printf's %0*llu; width <= 20),
 * written at `to`: their count. */
static inline int padded_digits(char *to, uint64_t u, int width) {
    char text[20], *end = text + sizeof text, *at = digits_before(end, u);
    while (end - at < width)
        *--at = '0';
    memcpy(to, at, (size_t)(end - at));
    return (int)(end - at);
}

/* u's decimal text, at least `width` digits, appended to b (the value texts' numbers and dates). */
static inline int buf_padded(buf_t *b, uint64_t u, int width) {
    char text[20];
    return buf_put(b, text, padded_digits(text, u, width));
}

/* -- reading --------------------------------------------------------------------------------- */

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

/* The n-byte two's complement number (n 1-8) whose bits are u: its sign extended. */
static inline int64_t signed_of(uint64_t u, int n) {
    int shift = 64 - 8 * n;
    return shift ? (int64_t)(u << shift) >> shift : (int64_t)u;
}

/* TIME2's packed value (my_time_packed_from_binary, values.decode_time2): negative values borrow
 * from the fraction. Its magnitude's bits: hours (10) minutes (6) seconds (6), then 24 of micros. */
static inline int64_t time2_packed(const unsigned char *v, int fsp) {
    int64_t intpart = (int64_t)be(v, 3) - 0x800000;
    if (fsp <= 0)
        return intpart * (1 << 24);
    if (fsp <= 2) {
        int64_t frac = v[3];
        if (intpart < 0 && frac)
            intpart += 1, frac -= 0x100;
        return intpart * (1 << 24) + frac * 10000;
    }
    if (fsp <= 4) {
        int64_t frac = (int64_t)be(v + 3, 2);
        if (intpart < 0 && frac)
            intpart += 1, frac -= 0x10000;
        return intpart * (1 << 24) + frac * 100;
    }
    return (int64_t)be(v, 6) - 0x800000000000LL;
}

/* A NEWDECIMAL's width bytes with the sign taken off (decimal2bin stores a negative one
 * complemented, and flips the top bit): its magnitude's groups into raw; 1 if it is negative. */
static inline int decimal_magnitude(const unsigned char *p, int width, unsigned char *raw) {
    int negative = !(p[0] & 0x80);
    for (int i = 0; i < width; i++)
        raw[i] = negative ? (unsigned char)~p[i] : p[i];
    raw[0] &= 0x7F;
    return negative;
}

/* A span of bytes that someone else owns. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} bytes_t;

/* -- row images to Avro (rowimage.c) --------------------------------------------------------- */

enum { DONE = 1, DECLINE = 0, FAIL = -1 };

/* A program's strings (native_spec.STRINGS_HEADER): n, n + 1 offsets, the bytes. Checked whole by
 * strings_of before anything reads them. */
typedef struct {
    Py_ssize_t n;
    const unsigned char *offsets; /* n + 1 little-endian int32 */
    const unsigned char *area;
    Py_ssize_t area_len;
} strings_t;

static inline bytes_t string_at(const strings_t *s, Py_ssize_t k) {
    Py_ssize_t start = (Py_ssize_t)le(s->offsets + 4 * k, 4), end = (Py_ssize_t)le(s->offsets + 4 * (k + 1), 4);
    return (bytes_t){s->area + start, end - start};
}

/* A code point's UTF-8 (it is no surrogate and at most U+10FFFF: wide_step's, a range's): its bytes in out. */
static inline int utf8_of(uint32_t cp, unsigned char out[4]) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A multi-byte charset's code table (native_spec.CODE_TABLES), learnt once and checked whole then
 * (learn_code_table): every child a later node, every text inside the texts and UTF-8, a range's
 * runs in order, inside it, and each a run of code points that have a UTF-8 form. */
typedef struct {
    uint32_t *nodes; /* 256 a node */
    Py_ssize_t nnodes;
    unsigned char *texts;
    Py_ssize_t texts_len;
    int ascii; /* each byte 0x00-0x7F a code whose text is itself (found when it is learnt) */
    uint32_t *range; /* the range as learnt (NULL: none), its runs from range + 1 + 2 * CODE_RANGE_WIDTHS */
    Py_ssize_t range_len, nruns; /* its uint32s, its runs */
} code_table_t;

/* The code of the table's range that starts s[0..n): its width, its text in *text (written in
 * own: a code point's UTF-8, or "?"); 0 if none does (too few bytes, a byte outside its range). */
static inline Py_ssize_t range_code_at(const code_table_t *t, const unsigned char *s, Py_ssize_t n, bytes_t *text,
                                       unsigned char own[4]) {
    const uint32_t *range = t->range, *runs = t->range + 1 + 2 * CODE_RANGE_WIDTHS;
    Py_ssize_t width = range[0], lo = 0, hi = t->nruns - 1;
    if (n < width)
        return 0;
    uint32_t place = 0;
    for (Py_ssize_t k = 0; k < width; k++) {
        uint32_t low = range[1 + 2 * k], high = range[2 + 2 * k];
        if (s[k] < low || s[k] > high)
            return 0;
        place = place * (high - low + 1) + (s[k] - low);
    }
    while (lo < hi) { /* the last run that starts at or before place: runs[0] starts at 0 */
        Py_ssize_t mid = lo + (hi - lo + 1) / 2;
        if (runs[2 * mid] <= place)
            lo = mid;
        else
            hi = mid - 1;
    }
    uint32_t first = runs[2 * lo + 1];
    if (first == CODE_RANGE_NO_TEXT) {
        own[0] = '?';
        *text = (bytes_t){own, 1};
    } else {
        *text = (bytes_t){own, utf8_of(first + (place - runs[2 * lo]), own)};
    }
    return width;
}

/* How many bytes from s on are ASCII the table keeps as itself (none unless t->ascii): a run
 * copied as it is, without a look-up a byte. */
static inline Py_ssize_t ascii_run(const code_table_t *t, const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    if (!t->ascii)
        return 0;
    for (uint64_t w; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ULL)
            break;
    }
    while (i < n && s[i] < 0x80)
        i++;
    return i;
}

/* The code that starts s[0..n): how many bytes it takes, its text in *text (in the table's texts,
 * or written in own); 0 if none does (the rows decoder raises there). Each step reads one more
 * byte of s, or the range's width of them, so it ends within n. */
static inline Py_ssize_t code_at(const code_table_t *t, const unsigned char *s, Py_ssize_t n, bytes_t *text,
                                 unsigned char own[4]) {
    uint32_t node = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t entry = t->nodes[(Py_ssize_t)node * 256 + s[i]];
        if (entry == 0)
            return 0;
        if (entry == CODE_RANGE)
            return range_code_at(t, s, n, text, own);
        if (!(entry & CODE_CHILD)) {
            *text = (bytes_t){t->texts + (entry >> CODE_TEXT_SHIFT), entry & CODE_TEXT_LENGTH};
            return i + 1;
        }
        node = entry & ~CODE_CHILD;
    }
    return 0;
}

/* The next piece of text at s[0..n): a run of ASCII the table keeps as itself, else one code. How
 * many bytes it takes, its UTF-8 in *text (own: as code_at); 0 where no code starts (the rows
 * decoder raises there). */
static inline Py_ssize_t text_step(const code_table_t *t, const unsigned char *s, Py_ssize_t n, bytes_t *text,
                                   unsigned char own[4]) {
    Py_ssize_t run = ascii_run(t, s, n);
    if (run == 0)
        return code_at(t, s, n, text, own);
    *text = (bytes_t){s, run};
    return run;
}

/* One character of text in a WIDE_FORMS form at s[0..n): its code point in *cp and how many bytes
 * it takes (2 or 4); 0 where the rows decoder raises: half a unit at the end, in UTF-16 a surrogate
 * not in a high-low pair, in UCS-2 any surrogate (ucs2's own decoder: it has no text), in UTF-32 a
 * surrogate or a unit past U+10FFFF (Python's codecs). Each step reads at most four bytes of s. */
static inline Py_ssize_t wide_step(int form, const unsigned char *s, Py_ssize_t n, uint32_t *cp) {
    if (form == WIDE_UTF32) {
        if (n < 4)
            return 0;
        *cp = (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
        return *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF) ? 0 : 4;
    }
    if (n < 2)
        return 0;
    int le16 = form == WIDE_UTF16LE;
    uint32_t unit = le16 ? (uint32_t)s[1] << 8 | s[0] : (uint32_t)s[0] << 8 | s[1];
    *cp = unit;
    if (unit < 0xD800 || unit > 0xDFFF)
        return 2;
    if (form == WIDE_UCS2 || unit > 0xDBFF || n < 4)
        return 0; /* a low surrogate first, or a high one with nothing after it */
    uint32_t low = le16 ? (uint32_t)s[3] << 8 | s[2] : (uint32_t)s[2] << 8 | s[3];
    if (low < 0xDC00 || low > 0xDFFF)
        return 0;
    *cp = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
    return 4;
}

/* A length-prefixed value at v (a prefix of c->a bytes, then that many): its bytes and how many
 * the column takes; DECLINE if they do not fit in room. */
static inline int prefixed(const column_t *c, const unsigned char *v, Py_ssize_t room, bytes_t *text,
                           Py_ssize_t *used) {
    if (room < c->a)
        return DECLINE;
    Py_ssize_t n = (Py_ssize_t)le(v, c->a);
    if (n > room - c->a)
        return DECLINE;
    *text = (bytes_t){v + c->a, n};
    *used = c->a + n;
    return DONE;
}

/* What writing a rows event's rows needs (connector/avro/transcode.py makes the program; the
 * envelope's parts come from connector/avro/encoding.py or, in the kernel, from the event). */
typedef struct {
    const column_t *cols;
    Py_ssize_t ncols;
    const key_t_ *keys;
    Py_ssize_t nkeys;
    strings_t strings;
    bytes_t key_prefix, first, rest, old_null, old_open, tail;
} program_t;

/* One row's message: its key (NULL, 0 without a key) and value, in buffers that live until the
 * next row. Returns DONE, DECLINE (take nothing of this event) or FAIL (a Python error is set). */
typedef int (*emit_fn)(void *ctx, const char *key, Py_ssize_t key_len, const char *value, Py_ssize_t value_len);

/* A byte JSON prints as it is inside a string: not the quote, the backslash or a control character. */
static inline int plain(unsigned char c) { return c >= 0x20 && c != '"' && c != '\\'; }

SL_INTERNAL int utf8_valid(const unsigned char *s, Py_ssize_t n);
/* UTF-8 text as a JSON string's inside, escaped as Python's json and MySQL's JSON printer both
 * escape it (canaltext.c); 0, or -1 with a Python error set. */
SL_INTERNAL int put_escaped(buf_t *out, const unsigned char *s, Py_ssize_t n);
/* A hashed column's (COL_HASH) hex SHA-256 of its salt and canal_text, its text put in scratch and taken
 * out again; *used: the image's bytes read. DONE, DECLINE or FAIL (canaltext.c). */
SL_INTERNAL int salted_digest(const column_t *c, const strings_t *strings, const unsigned char *v, Py_ssize_t room,
                              buf_t *scratch, Py_ssize_t *used, char hex[64]);
/* A MySQL binary JSON document's text as jsonb.to_text(jsonb.parse(doc)) gives it, appended to
 * out: DONE, DECLINE (what it appended is not to be used) or FAIL (jsonb.c). */
SL_INTERNAL int jsonb_text(const unsigned char *doc, Py_ssize_t n, buf_t *out);
/* Whether jsonb_text takes the document (its text made aside and dropped): what it takes, the Python
 * path decodes. */
SL_INTERNAL int jsonb_ok(const unsigned char *doc, Py_ssize_t n);
SL_INTERNAL int decimal_width(int precision, int scale);
/* The code table learnt as `number`, or NULL (rowimage.c). */
SL_INTERNAL const code_table_t *code_table(int32_t number);
/* Learn code table `number` from its nodes and texts (copied): 1; 0 if they are not a code table,
 * or differ from the table learnt as that number before; -1 with a Python error set. */
SL_INTERNAL int learn_code_table(int32_t number, const unsigned char *nodes, Py_ssize_t nodes_len,
                                 const unsigned char *texts, Py_ssize_t texts_len, const unsigned char *range,
                                 Py_ssize_t range_len);
SL_INTERNAL int strings_of(const unsigned char *blob, Py_ssize_t len, strings_t *out);
SL_INTERNAL int program_shapes(const column_t *cols, Py_ssize_t ncols);
/* One VECTOR float (little-endian at v) as the Python path has it, six significant digits, into
 * packed (little-endian): DONE, DECLINE (a NaN) or FAIL (rowimage.c). */
SL_INTERNAL int vector_float(const unsigned char *v, unsigned char packed[4]);
/* A program as Python hands it over (its columns, keys and strings as bytes) read into prog's cols,
 * keys and strings: 0 if it is malformed (not whole records, program_ok, keys_ok). The
 * transcoder's entry points and the kernel's plans read theirs through it. */
SL_INTERNAL int program_read(const void *cols, Py_ssize_t cols_len, const void *keys, Py_ssize_t keys_len,
                             const unsigned char *strings, Py_ssize_t strings_len, program_t *prog);
/* Every row of a rows event's images, each emitted as its key and value; DONE only when the
 * images end exactly at `end`. base: the first row's number. */
SL_INTERNAL int transcode_rows(const program_t *prog, const unsigned char *s, Py_ssize_t end, int kind,
                               long long base, emit_fn emit, void *ctx);
/* The rows of images that fit a walk layout, or -1. */
SL_INTERNAL Py_ssize_t walk_rows(const walk_t *cols, Py_ssize_t ncols, const unsigned char *s, Py_ssize_t end,
                                 int images);

/* -- canal's strings as JSON (canaltext.c) ---------------------------------------------------- */

/* Every row's `data` JSON object (str), an UPDATE's as (data, old); `names`: a tuple of each
 * column's JSON key and colon (bytes). DONE, DECLINE or FAIL (a Python error set). */
SL_INTERNAL int json_rows(const program_t *prog, PyObject *names, const unsigned char *s, Py_ssize_t end, int kind,
                          PyObject *out);

/* canal-json's messages of a rows event (connector/canal.py): what they share, made per event by the
 * caller. names: each column's JSON key and colon; types: each column's sqlType codes; middle: from
 * `],"database"` to `"old":`; first_sql / rest_sql: from `,"pkNames"` to `"sqlType":`, with the
 * statement's text (the first row's) or "" (the others'); tail: from `,"table"` to the end. */
typedef struct {
    strings_t names;
    const sqltype_t *types;
    int full_old; /* `old`: the whole before image, not its changed columns */
    int per_event; /* a rows event's rows in one message, without a key (message_rows = "event") */
    bytes_t middle, first_sql, rest_sql, tail;
} canal_t;

/* Whether a program's canal-json parts fit it: a name and a sqlType per column, a wider code only on
 * an unsigned integer, whose digits canal_rows reads (canaltext.c). What
 * canal_json and the kernel's plans check, with program_ok and keys_ok, before they use them. */
SL_INTERNAL int canal_ok(const column_t *cols, Py_ssize_t ncols, const strings_t *names, const sqltype_t *types,
                         Py_ssize_t types_len);

/* Every row of a rows event's images as a canal-json message, keyed by its key columns' canal texts
 * (prog->keys: the key's columns, in order), each emitted, or (canal->per_event) all of them as one
 * message with no key; *rows: the rows read. DECLINE where the Python path's text could differ, or an
 * UPDATE moves a key of a message per row (canaltext.c). */
SL_INTERNAL int canal_rows(const program_t *prog, const canal_t *canal, const unsigned char *s, Py_ssize_t end,
                           int kind, emit_fn emit, void *ctx, Py_ssize_t *rows);

/* -- hashes (hashes.c) ----------------------------------------------------------------------- */

SL_INTERNAL uint32_t murmur2(const unsigned char *data, Py_ssize_t length);
/* CRC-32 (zlib's); `generic`: without carry-less multiply (for the tests). */
SL_INTERNAL uint32_t crc32_with(const unsigned char *data, Py_ssize_t length, int generic);
static inline uint32_t crc32_of(const unsigned char *data, Py_ssize_t length) { return crc32_with(data, length, 0); }
/* The SHA-256 of a's bytes then b's, as 64 lowercase hex digits (hashlib's hexdigest); `generic`:
 * without the CPU's SHA extensions (for the tests). */
SL_INTERNAL void sha256_hex(const unsigned char *a, Py_ssize_t na, const unsigned char *b, Py_ssize_t nb,
                            char hex[64], int generic);
/* The partition Kafka's Java client picks for a key's bytes after its first `skip` (murmur2, positive,
 * modulo): the key's framing is not hashed, so a partition outlives a key schema change. */
static inline int32_t key_partition(const unsigned char *key, Py_ssize_t length, Py_ssize_t skip, int32_t partitions) {
    Py_ssize_t from = skip < length ? skip : length;
    return (int32_t)((murmur2(key + from, length - from) & 0x7fffffffu) % (uint32_t)partitions);
}

/* -- the kernel (kernel.c) ------------------------------------------------------------------- */

/* A message for Kafka: its key (NULL: none), value and partition. */
typedef struct {
    PyObject *key, *value;
    int32_t partition;
} out_t;

/* Messages as connector/sink/partitioning.route places them, into two new lists: lists[1] (tails), for
 * the last message of each partition, (value, key, partition, count), count being how many went there;
 * lists[0] (plain), (value, key, partition) for the others, in order; a NULL key is None. 0, or -1 with
 * a Python error set and no lists. */
SL_INTERNAL int route_lists(const out_t *items, Py_ssize_t n, int32_t partitions, PyObject *lists[2]);
SL_INTERNAL extern PyTypeObject KernelType;
/* Kernel and its results' types (KernelRun, KernelTransaction) ready and added to the module; -1: failed. */
SL_INTERNAL int kernel_types(PyObject *module);

#endif
