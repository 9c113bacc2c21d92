/* Row images of a binlog rows event -> Avro bytes, without Python objects per value.
 *
 * connector/avro/transcode.py builds the programs this runs; it is an accelerator, not a second
 * reference: the generated Python decoders and encoders stay the definition, and everything
 * here answers DECLINE ("not this way") for anything it does not handle exactly as they do, so
 * the caller takes the Python path. It never fails on data: a truncated image, a value with no
 * typed form (a day the calendar lacks, a DECIMAL group with too many digits), text that is not
 * strict UTF-8, a NULL in a field that cannot hold one. Every read is bounds-checked against the
 * end of the images, and every loop moves on by at least one byte or one column.
 *
 * tests/test_transcode.py holds it to the Python path byte for byte, on live rows and on
 * arbitrary bytes (equal, or declined, never different).
 */
#include "native.h"

#include <limits.h>

int buf_grow(buf_t *b, Py_ssize_t more) {
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

/* An unscaled value's magnitude: a DECIMAL's of up to 65 digits (10^65 < 2^216), or an unsigned
 * 64-bit one; 32-bit limbs, the least significant first, `n` of them in use. */
typedef struct {
    uint32_t limb[8];
    int n;
} magnitude_t;

static magnitude_t magnitude_of(uint64_t u) {
    magnitude_t m = {{(uint32_t)u, (uint32_t)(u >> 32)}, 2};
    return m;
}

/* m * mul + add; m stays within its limbs as long as its digits do (read_decimal checks them). */
static void magnitude_mul_add(magnitude_t *m, uint32_t mul, uint32_t add) {
    uint64_t carry = add;
    for (int i = 0; i < m->n; i++) {
        uint64_t t = (uint64_t)m->limb[i] * mul + carry;
        m->limb[i] = (uint32_t)t;
        carry = t >> 32;
    }
    if (carry && m->n < 8)
        m->limb[m->n++] = (uint32_t)carry;
}

/* Avro decimal bytes: the two's complement of -m or m in (bit_length(m) + 8) / 8 bytes, as
 * connector/avro/binary.py writes it (so -128 takes two bytes, and 0 one). */
static int buf_decimal(buf_t *b, const magnitude_t *m, int negative) {
    int top = m->n;
    while (top > 0 && m->limb[top - 1] == 0)
        top--;
    int bits = top ? (top - 1) * 32 + 32 - __builtin_clz(m->limb[top - 1]) : 0, n = (bits + 8) / 8;
    if (buf_long(b, n) < 0 || buf_reserve(b, n) < 0)
        return -1;
    unsigned char *out = (unsigned char *)b->data + b->len;
    for (int i = 0; i < n; i++) /* byte i from the least significant end */
        out[n - 1 - i] = i / 4 < top ? (unsigned char)(m->limb[i / 4] >> (8 * (i % 4))) : 0;
    for (int i = n - 1, carry = 1; negative && i >= 0; i--) { /* two's complement: invert, add one */
        unsigned v = (unsigned char)~out[i] + (unsigned)carry;
        out[i] = (unsigned char)v;
        carry = (int)(v >> 8);
    }
    b->len += n;
    return 0;
}

/* Strict UTF-8, as CPython's decoder: no overlongs, no surrogates, nothing past U+10FFFF. */
int utf8_valid(const unsigned char *s, Py_ssize_t n) {
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

static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

int decimal_width(int precision, int scale) {
    int intg = precision - scale;
    return intg / 9 * 4 + DIG2BYTES[intg % 9] + scale / 9 * 4 + DIG2BYTES[scale % 9];
}

/* NEWDECIMAL (decimal.cc, decimal2bin) as its unscaled value's magnitude and sign (1: negative);
 * -1 if a group holds more digits than it should (values.decimal_unscaled_decoder raises NotTyped
 * there). Up to MAX_DECIMAL_DIGITS (program_ok), in at most 30 bytes. */
static int read_decimal(const unsigned char *p, int precision, int scale, magnitude_t *out) {
    unsigned char raw[32];
    int negative = decimal_magnitude(p, decimal_width(precision, scale), raw);
    int intg = precision - scale, at = 0;
    *out = (magnitude_t){{0}, 0};
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
                return -1;
            magnitude_mul_add(out, POW10[digits], group);
        }
    }
    return negative;
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

/* -- one value, one image, one key ------------------------------------------------------------ */

typedef struct {
    Py_ssize_t start, end; /* the value's bytes in the image buffer; start < 0: NULL */
} span_t;

static int put_string(buf_t *out, bytes_t text) {
    return buf_long(out, text.n) < 0 || buf_put(out, text.p, text.n) < 0 ? FAIL : DONE;
}

static int text_value(const column_t *c, const unsigned char *v, Py_ssize_t *pos, Py_ssize_t room, buf_t *out) {
    bytes_t text;
    Py_ssize_t used;
    if (prefixed(c, v, room, &text, &used) != DONE)
        return DECLINE;
    *pos += used;
    if (c->op == OP_UTF8)
        return utf8_valid(text.p, text.n) ? put_string(out, text) : DECLINE;
    Py_ssize_t padded = text.n < c->b ? c->b : text.n; /* BINARY(n): its 0x00 pad, which the binlog leaves out */
    if (buf_long(out, padded) < 0 || buf_put(out, text.p, text.n) < 0 || buf_reserve(out, padded - text.n) < 0)
        return FAIL;
    memset(out->data + out->len, 0, (size_t)(padded - text.n));
    out->len += padded - text.n;
    return DONE;
}

/* One float of a VECTOR as the Python path has it: its flat text, VECTOR_TO_STRING's "%.5e", read
 * back by Python's own formatting and parsing, so six significant digits, rounded as Python rounds
 * them, and packed again as a float (struct "<f": round to nearest; six digits do not overflow),
 * little-endian into `packed`. Declined: a NaN (what was written goes with the event, as any value's). */
int vector_float(const unsigned char *v, unsigned char packed[4]) {
    uint32_t bits = (uint32_t)le(v, 4);
    float f;
    memcpy(&f, &bits, 4);
    if (f != f)
        return DECLINE;
    char *text = PyOS_double_to_string((double)f, 'e', 5, 0, NULL);
    if (text == NULL)
        return FAIL;
    double back = PyOS_string_to_double(text, NULL, NULL);
    PyMem_Free(text);
    if (back == -1.0 && PyErr_Occurred())
        return FAIL;
    float rounded = (float)back;
    memcpy(&bits, &rounded, 4);
    for (int b = 0; b < 4; b++)
        packed[b] = (unsigned char)(bits >> (8 * b));
    return DONE;
}

/* VECTOR: its floats as an Avro array of float (a block of them, then the end; none: the end alone). Each
 * float is the Python path's (vector_float: encoding._typed's convert(render(value))). Declined: a
 * length that is not whole floats (the Python path names it) and a NaN. */
static int vector_value(const column_t *c, const unsigned char *v, Py_ssize_t *pos, Py_ssize_t room, buf_t *out) {
    bytes_t value;
    Py_ssize_t used;
    if (prefixed(c, v, room, &value, &used) != DONE || value.n % 4)
        return DECLINE;
    if (value.n && (buf_long(out, value.n / 4) < 0 || buf_reserve(out, value.n) < 0))
        return FAIL;
    for (Py_ssize_t i = 0; i < value.n; i += 4) { /* each float moves on by its 4 bytes */
        int r = vector_float(value.p + i, (unsigned char *)out->data + out->len); /* Avro's float: little-endian */
        if (r != DONE)
            return r;
        out->len += 4;
    }
    *pos += used;
    static const char end = 0;
    return buf_put(out, &end, 1) < 0 ? FAIL : DONE;
}

static int temporal_value(const column_t *c, const unsigned char *v, buf_t *out, int *null) {
    int64_t days;
    int ok;
    switch (c->op) {
    case OP_DATE: {
        uint64_t d = le(v, 3);
        ok = epoch_days((int64_t)(d >> 9), (unsigned)(d >> 5 & 15), (unsigned)(d & 31), &days);
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
        int64_t ymd = packed >> 17, hms = packed & 0x1FFFF, ym = ymd >> 5;
        ok = epoch_days(ym / 13, (unsigned)(ym % 13), (unsigned)(ymd & 31), &days);
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
    default: { /* OP_TIMESTAMP2: null for the zero TIMESTAMP, second 0 with no fraction (MariaDB stores
                 * 1970-01-01 00:00:00.5 as second 0 with one) */
        int64_t seconds = (int64_t)be(v, 4);
        int64_t micros = fraction_micros(v + 4, c->a);
        if (micros < 0)
            return DECLINE;
        if (seconds == 0 && micros == 0) {
            *null = 1;
            return DONE;
        }
        return buf_long(out, seconds * 1000000 + micros) < 0 ? FAIL : DONE;
    }
    }
}

/* TIME2 (values.decode_time2, then avro/values._time of its text): signed microseconds. Negative
 * values borrow from the fraction; a fraction past 999,999 (bytes no server writes) prints more
 * digits than the text's parse gives back: Python's. */
static int time2_value(const column_t *c, const unsigned char *v, buf_t *out) {
    int fsp = c->a;
    int64_t packed = time2_packed(v, fsp);
    int negative = packed < 0;
    uint64_t magnitude = negative ? (uint64_t)0 - (uint64_t)packed : (uint64_t)packed;
    uint64_t hms = magnitude >> 24, micros = magnitude & 0xFFFFFF;
    if (micros > 999999)
        return DECLINE;
    if (fsp <= 0)
        micros = 0; /* the text prints no fraction */
    else
        micros -= micros % POW10[6 - fsp]; /* nor more digits than fsp */
    int64_t total = (((int64_t)(hms >> 12 & 0x3FF) * 60 + (int64_t)(hms >> 6 & 63)) * 60 + (int64_t)(hms & 63)) *
                        1000000 + (int64_t)micros;
    return buf_long(out, negative ? -total : total) < 0 ? FAIL : DONE;
}

/* ENUM (values.decode_enum): the label of a 1-based index, "" for 0; an index past the labels: Python's. */
static int enum_value(const column_t *c, const strings_t *strings, const unsigned char *v, buf_t *out) {
    uint64_t index = le(v, c->width);
    if (index == 0)
        return put_string(out, (bytes_t){NULL, 0});
    if (index > (uint64_t)c->b)
        return DECLINE;
    return put_string(out, string_at(strings, c->a + (Py_ssize_t)index - 1));
}

/* SET (values.decode_set): the labels of the bits set, in order, comma-joined; other bits ignored. */
static int set_value(const column_t *c, const strings_t *strings, const unsigned char *v, buf_t *out) {
    uint64_t mask = le(v, c->width);
    Py_ssize_t total = 0, count = 0;
    for (int i = 0; i < c->b; i++)
        if (mask >> i & 1)
            total += string_at(strings, c->a + i).n, count++;
    if (buf_long(out, total + (count ? count - 1 : 0)) < 0)
        return FAIL;
    for (int i = 0, put = 0; i < c->b; i++) {
        if (!(mask >> i & 1))
            continue;
        bytes_t label = string_at(strings, c->a + i);
        if ((put++ && buf_put(out, ",", 1) < 0) || buf_put(out, label.p, label.n) < 0)
            return FAIL;
    }
    return DONE;
}

/* Text in a single-byte charset: each byte's character from the charset's table (256 strings from
 * b), as UTF-8; a byte the charset does not map makes Python's decoder raise: Python's. */
static int text8_value(const column_t *c, const strings_t *strings, const unsigned char *v, Py_ssize_t *pos,
                       Py_ssize_t room, buf_t *out) {
    bytes_t value;
    Py_ssize_t used, total = 0;
    if (prefixed(c, v, room, &value, &used) != DONE)
        return DECLINE;
    const unsigned char *text = value.p;
    Py_ssize_t n = value.n;
    int ascii = c->flags & COL_ASCII, looked_up = 0; /* with COL_ASCII, bytes below 0x80 are their own text */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ascii && text[i] < 0x80) {
            total++;
            continue;
        }
        Py_ssize_t one = string_at(strings, c->b + text[i]).n;
        if (one == 0)
            return DECLINE;
        total += one;
        looked_up = 1;
    }
    *pos += used;
    if (buf_long(out, total) < 0 || buf_reserve(out, total) < 0)
        return FAIL;
    if (ascii && !looked_up) { /* every byte its own text: one copy */
        memcpy(out->data + out->len, text, (size_t)n);
        out->len += n;
        return DONE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        bytes_t ch = ascii && text[i] < 0x80 ? (bytes_t){text + i, 1} : string_at(strings, c->b + text[i]);
        memcpy(out->data + out->len, ch.p, (size_t)ch.n);
        out->len += ch.n;
    }
    return DONE;
}

/* Text in a multi-byte charset: each code's text from the charset's code table (b), as UTF-8;
 * bytes that start no code make the rows decoder raise: Python's. */
static int textmb_value(const column_t *c, const unsigned char *v, Py_ssize_t *pos, Py_ssize_t room, buf_t *out) {
    bytes_t value, ch = {v, 0};
    Py_ssize_t used, total = 0, width;
    unsigned char own[4];
    const code_table_t *t = code_table(c->b);
    if (prefixed(c, v, room, &value, &used) != DONE)
        return DECLINE;
    for (Py_ssize_t i = 0; i < value.n; i += width) {
        if ((width = text_step(t, value.p + i, value.n - i, &ch, own)) == 0)
            return DECLINE;
        total += ch.n;
    }
    *pos += used;
    if (buf_long(out, total) < 0 || buf_reserve(out, total) < 0)
        return FAIL;
    for (Py_ssize_t i = 0; i < value.n; i += width) {
        if ((width = text_step(t, value.p + i, value.n - i, &ch, own)) == 0)
            break; /* not reached: the first pass read these codes */
        memcpy(out->data + out->len, ch.p, (size_t)ch.n);
        out->len += ch.n;
    }
    return DONE;
}

/* UTF-16, UTF-32 or UCS-2 text (form b) as UTF-8; where the rows decoder raises: Python's. */
static int wide_value(const column_t *c, const unsigned char *v, Py_ssize_t *pos, Py_ssize_t room, buf_t *out) {
    bytes_t value;
    Py_ssize_t used, total = 0, width;
    uint32_t cp;
    unsigned char utf8[4];
    if (prefixed(c, v, room, &value, &used) != DONE)
        return DECLINE;
    for (Py_ssize_t i = 0; i < value.n; i += width) {
        if ((width = wide_step(c->b, value.p + i, value.n - i, &cp)) == 0)
            return DECLINE;
        total += utf8_of(cp, utf8);
    }
    *pos += used;
    if (buf_long(out, total) < 0 || buf_reserve(out, total) < 0)
        return FAIL;
    for (Py_ssize_t i = 0; i < value.n; i += width) {
        if ((width = wide_step(c->b, value.p + i, value.n - i, &cp)) == 0)
            break; /* not reached: the first pass read these characters */
        out->len += utf8_of(cp, (unsigned char *)out->data + out->len);
    }
    return DONE;
}

/* A binary JSON document's text as an Avro string. The text is written where a two-byte length
 * leaves it room (a text under 8,192 bytes), then moved if its length takes another width. */
static int json_value(const column_t *c, const unsigned char *v, Py_ssize_t *pos, Py_ssize_t room, buf_t *out) {
    bytes_t doc;
    Py_ssize_t used, start = out->len;
    if (prefixed(c, v, room, &doc, &used) != DONE)
        return DECLINE;
    if (buf_reserve(out, 2) < 0)
        return FAIL;
    out->len += 2;
    int r = jsonb_text(doc.p, doc.n, out);
    if (r != DONE) {
        out->len = start;
        return r;
    }
    Py_ssize_t n = out->len - start - 2;
    unsigned char length[10];
    int width = long_bytes(n, length);
    if (width > 2 && buf_reserve(out, width - 2) < 0) {
        out->len = start;
        return FAIL;
    }
    if (width != 2)
        memmove(out->data + start + width, out->data + start + 2, (size_t)n);
    memcpy(out->data + start, length, (size_t)width);
    out->len = start + width + n;
    *pos += used;
    return DONE;
}

/* One value at *pos: its Avro encoding appended to out, or NULL (*null: a zero date). */
static int value(const column_t *c, const strings_t *strings, const unsigned char *s, Py_ssize_t *pos,
                 Py_ssize_t end, buf_t *out, int *null) {
    Py_ssize_t p = *pos;
    const unsigned char *v = s + p;
    *null = 0;
    if (c->op == OP_UTF8 || c->op == OP_BYTES || c->op == OP_GEOMETRY)
        return text_value(c, v, pos, end - p, out);
    if (c->op == OP_VECTOR)
        return vector_value(c, v, pos, end - p, out);
    if (c->op == OP_TEXT8)
        return text8_value(c, strings, v, pos, end - p, out);
    if (c->op == OP_JSON)
        return json_value(c, v, pos, end - p, out);
    if (c->op == OP_TEXTMB)
        return textmb_value(c, v, pos, end - p, out);
    if (c->op == OP_WIDE)
        return wide_value(c, v, pos, end - p, out);
    if (end - p < c->width)
        return DECLINE;
    *pos = p + c->width;
    switch (c->op) {
    case OP_INT:
        return buf_long(out, signed_of(le(v, c->width), c->width)) < 0 ? FAIL : DONE;
    case OP_UINT:
        return buf_long(out, (int64_t)le(v, c->width)) < 0 ? FAIL : DONE;
    case OP_UINT64: {
        magnitude_t m = magnitude_of(le(v, 8));
        return buf_decimal(out, &m, 0) < 0 ? FAIL : DONE;
    }
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
        magnitude_t unscaled;
        int negative = read_decimal(v, c->a, c->b, &unscaled);
        if (negative < 0)
            return DECLINE;
        return buf_decimal(out, &unscaled, negative) < 0 ? FAIL : DONE;
    }
    case OP_DATE:
    case OP_DATETIME2:
    case OP_TIMESTAMP2:
        return temporal_value(c, v, out, null);
    case OP_YEAR:
        return buf_long(out, v[0] ? 1900 + v[0] : 0) < 0 ? FAIL : DONE;
    case OP_TIME2:
        return time2_value(c, v, out);
    case OP_BIT: {
        uint64_t bits = be(v, c->width);
        if (bits > INT64_MAX) /* only bytes no server writes: BIT(n < 64) holds less */
            return DECLINE;
        return buf_long(out, (int64_t)bits) < 0 ? FAIL : DONE;
    }
    case OP_BIT64: {
        magnitude_t m = magnitude_of(be(v, 8));
        return buf_decimal(out, &m, 0) < 0 ? FAIL : DONE;
    }
    case OP_ENUM:
        return enum_value(c, strings, v, out);
    case OP_SET:
        return set_value(c, strings, v, out);
    }
    return DECLINE;
}

/* A NULL in a field whose union has it as branch `branch`: DECLINE where it has none (the Avro field
 * cannot hold it; Python names the value). */
static inline int null_field(buf_t *out, int32_t branch) {
    return branch < 0 ? DECLINE : buf_long(out, branch) < 0 ? FAIL : DONE;
}

/* A column a [[kafka.columns]] rule shapes (COL_SHAPED): its value read and checked as the op reads
 * it, then unwritten; a masked column's value branch and mask (the program's string) in its place,
 * its null a null. A zero date is masked too: the Python path masks its text. A hashed column's
 * value is read as its canal text instead (the text the Python path hashes), and its value branch
 * and the SHA-256 of the salt (the program's string) and that text, in hex, written in its place.
 * *sp: the mask or digest written, which a key made of the column copies (the Python path keys a
 * row by its shaped values), or start -1. */
static int shaped(const column_t *c, const strings_t *strings, const unsigned char *s, Py_ssize_t *pos,
                  Py_ssize_t end, buf_t *out, int null, span_t *sp) {
    Py_ssize_t mark = out->len;
    char hex[64];
    if (!null && c->flags & COL_HASH) {
        Py_ssize_t used;
        int r = salted_digest(c, strings, s + *pos, end - *pos, out, &used, hex);
        if (r != DONE)
            return r;
        *pos += used;
    } else if (!null) {
        int zero;
        int r = value(c, strings, s, pos, end, out, &zero);
        if (r != DONE)
            return r;
        out->len = mark;
    }
    sp->start = -1;
    if (c->flags & COL_DROP)
        return DONE;
    if (null)
        return null_field(out, c->null_branch);
    if (c->value_branch >= 0 && buf_long(out, c->value_branch) < 0)
        return FAIL;
    Py_ssize_t start = out->len;
    if (c->flags & COL_HASH) {
        if (buf_long(out, sizeof hex) < 0 || buf_put(out, hex, sizeof hex) < 0)
            return FAIL;
    } else {
        bytes_t mask = string_at(strings, c->flags >> COL_STRING_SHIFT);
        if (buf_put(out, mask.p, mask.n) < 0)
            return FAIL;
    }
    sp->start = start, sp->end = out->len;
    return DONE;
}

/* One row image (null bitmap, then the non-NULL values) as the fields of an Avro record. */
static int image(const column_t *cols, Py_ssize_t ncols, const strings_t *strings, const unsigned char *s,
                 Py_ssize_t *pos, Py_ssize_t end, buf_t *out, span_t *spans) {
    Py_ssize_t nbytes = (ncols + 7) / 8, p = *pos;
    if (end - p < nbytes)
        return DECLINE;
    const unsigned char *bitmap = s + p;
    p += nbytes;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        const column_t *c = &cols[i];
        int null = bitmap[i >> 3] >> (i & 7) & 1, r;
        Py_ssize_t mark = out->len;
        if (c->flags & COL_SHAPED) {
            if ((r = shaped(c, strings, s, &p, end, out, null, &spans[i])) != DONE)
                return r;
            continue;
        }
        if (!null) {
            if (c->value_branch >= 0 && buf_long(out, c->value_branch) < 0)
                return FAIL;
            spans[i].start = out->len;
            if ((r = value(c, strings, s, &p, end, out, &null)) != DONE)
                return r;
            spans[i].end = out->len;
            if (null)
                out->len = mark; /* a zero date: no value after all */
        }
        if (null) {
            spans[i].start = -1;
            if ((r = null_field(out, c->null_branch)) != DONE)
                return r;
        }
    }
    *pos = p;
    return DONE;
}

static int key_fields(const key_t_ *keys, Py_ssize_t nkeys, const buf_t *img, const span_t *spans, buf_t *out) {
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        const span_t *sp = &spans[keys[k].column];
        int r;
        if (sp->start < 0) {
            if ((r = null_field(out, keys[k].null_branch)) != DONE)
                return r;
            continue;
        }
        if (keys[k].value_branch >= 0 && buf_long(out, keys[k].value_branch) < 0)
            return FAIL;
        if (buf_put(out, img->data + sp->start, sp->end - sp->start) < 0)
            return FAIL;
    }
    return DONE;
}

/* An image's key (the framing's prefix, then the key fields) into kb. */
static int one_key(const program_t *prog, const buf_t *img, const span_t *spans, buf_t *kb) {
    kb->len = 0;
    if (buf_put(kb, prog->key_prefix.p, prog->key_prefix.n) < 0)
        return FAIL;
    return key_fields(prog->keys, prog->nkeys, img, spans, kb);
}

/* The key of the data image into kb; an UPDATE whose before image has another key is declined
 * (it is a DELETE and an INSERT: Python's). */
static int row_key(const program_t *prog, const buf_t *img, const span_t *spans, const buf_t *before,
                   const span_t *before_spans, buf_t *kb, buf_t *kb2) {
    int r;
    if ((r = one_key(prog, img, spans, kb)) != DONE || before == NULL)
        return r;
    if ((r = one_key(prog, before, before_spans, kb2)) != DONE)
        return r;
    return kb->len == kb2->len && memcmp(kb->data, kb2->data, (size_t)kb->len) == 0 ? DONE : DECLINE;
}

/* A row's value: the envelope's opening, the data image, `old`, the tail and the row's number. */
static int row_value(const program_t *prog, Py_ssize_t i, long long base, const buf_t *data, const buf_t *old,
                     buf_t *out) {
    static const char zero = 0;
    const bytes_t *open = i == 0 ? &prog->first : &prog->rest;
    out->len = 0;
    if (buf_put(out, open->p, open->n) < 0 || buf_put(out, data->data, data->len) < 0 || buf_put(out, &zero, 1) < 0)
        return FAIL;
    if (old != NULL) {
        if (buf_put(out, prog->old_open.p, prog->old_open.n) < 0 || buf_put(out, old->data, old->len) < 0 ||
            buf_put(out, &zero, 1) < 0)
            return FAIL;
    } else if (buf_put(out, prog->old_null.p, prog->old_null.n) < 0)
        return FAIL;
    if (buf_put(out, prog->tail.p, prog->tail.n) < 0 || buf_long(out, base + i) < 0)
        return FAIL;
    return DONE;
}

/* transcode_rows's buffers, kept between calls up to KEPT_MAX bytes each (a statement's text can
 * make one event's first row hundreds of KB). The GIL serialises calls; kept_in_use guards the
 * one way back in: a finalizer run by an allocation inside a call that transcodes again. */
#define KEPT_MAX (1 << 20)
#define NKEPT 5
static buf_t kept[NKEPT];
static int kept_in_use;

static int each_row(const program_t *prog, const unsigned char *s, Py_ssize_t end, int kind, long long base,
                    emit_fn emit, void *ctx, buf_t *b, span_t *spans) {
    buf_t *first = &b[0], *second = &b[1], *value_buf = &b[2], *kb = &b[3], *kb2 = &b[4];
    Py_ssize_t pos = 0;
    int r;
    for (Py_ssize_t i = 0; pos < end; i++) { /* image() moves pos on by at least its bitmap's byte */
        first->len = second->len = 0;
        if ((r = image(prog->cols, prog->ncols, &prog->strings, s, &pos, end, first, spans)) != DONE)
            return r;
        if (kind == KIND_UPDATE &&
            (r = image(prog->cols, prog->ncols, &prog->strings, s, &pos, end, second, spans + prog->ncols)) != DONE)
            return r;
        /* WRITE and DELETE: the one image is the data; UPDATE: the after image, the before as old */
        int update = kind == KIND_UPDATE;
        const buf_t *data = update ? second : first;
        const span_t *data_spans = update ? spans + prog->ncols : spans;
        if (prog->nkeys && (r = row_key(prog, data, data_spans, update ? first : NULL, spans, kb, kb2)) != DONE)
            return r;
        if ((r = row_value(prog, i, base, data, update ? first : NULL, value_buf)) != DONE)
            return r;
        if ((r = emit(ctx, prog->nkeys ? kb->data : NULL, prog->nkeys ? kb->len : 0, value_buf->data,
                      value_buf->len)) != DONE)
            return r;
    }
    return DONE;
}

int transcode_rows(const program_t *prog, const unsigned char *s, Py_ssize_t end, int kind, long long base,
                   emit_fn emit, void *ctx) {
    if (prog->ncols < 1) /* a row of no columns takes no bytes: the loop could not move */
        return DECLINE;
    buf_t b[NKEPT] = {{0}};
    int took = !kept_in_use;
    if (took) { /* the buffers of the last call: no malloc, no fresh pages, per event */
        kept_in_use = 1;
        memcpy(b, kept, sizeof b);
    }
    span_t *spans = PyMem_Calloc((size_t)prog->ncols * 2, sizeof(span_t));
    int r = FAIL;
    if (spans == NULL)
        PyErr_NoMemory();
    else
        r = each_row(prog, s, end, kind, base, emit, ctx, b, spans);
    PyMem_Free(spans);
    for (int i = 0; i < NKEPT; i++) {
        if (took && b[i].cap <= KEPT_MAX) {
            b[i].len = 0;
            kept[i] = b[i];
        } else {
            PyMem_Free(b[i].data);
            if (took)
                kept[i] = (buf_t){0};
        }
    }
    if (took)
        kept_in_use = 0;
    return r;
}

/* -- checking what Python hands in ------------------------------------------------------------- */

/* The most a BINARY(n) value is padded to: n < 256 as MySQL logs it (its metadata keeps up to 10 bits). */
#define MAX_PAD 0xFFFF

/* A program's strings: a count, its offsets, the bytes, all inside the blob, offsets in order. */
int strings_of(const unsigned char *blob, Py_ssize_t len, strings_t *out) {
    *out = (strings_t){0, NULL, NULL, 0};
    if (len == 0)
        return 1; /* none */
    if (len < 4)
        return 0;
    int64_t n = (int32_t)le(blob, 4);
    if (n < 0 || n > (len - 4) / 4 - 1)
        return 0;
    const unsigned char *offsets = blob + 4, *area = blob + 4 + 4 * (n + 1);
    Py_ssize_t area_len = len - 4 - 4 * (Py_ssize_t)(n + 1), last = 0;
    for (int64_t k = 0; k <= n; k++) {
        int64_t at = (int32_t)le(offsets + 4 * k, 4);
        if (at < last || at > area_len)
            return 0;
        last = (Py_ssize_t)at;
    }
    *out = (strings_t){(Py_ssize_t)n, offsets, area, area_len};
    return 1;
}

/* -- multi-byte charsets' code tables (native_spec.CODE_TABLES) --------------------------------- */

static code_table_t code_tables[CODE_TABLE_COUNT];

const code_table_t *code_table(int32_t number) {
    return number >= 0 && number < (int32_t)CODE_TABLE_COUNT && code_tables[number].nodes ? &code_tables[number] : NULL;
}

/* The range (range_len uint32s) is one (native_spec.CODE_TABLES): a width of 1 to CODE_RANGE_WIDTHS,
 * a low byte at most its high one at each position, runs in order of place from place 0, inside the
 * block, each a run of code points with a UTF-8 form (no surrogate, none past U+10FFFF) or "?". */
static int range_ok(const uint32_t *range, Py_ssize_t range_len, Py_ssize_t *nruns) {
    Py_ssize_t head = 1 + 2 * CODE_RANGE_WIDTHS;
    if (range_len < head + 2 || (range_len - head) % 2 || range[0] < 1 || range[0] > CODE_RANGE_WIDTHS)
        return 0;
    uint64_t places = 1;
    for (uint32_t k = 0; k < range[0]; k++) {
        if (range[1 + 2 * k] > range[2 + 2 * k] || range[2 + 2 * k] > 0xFF)
            return 0;
        places *= range[2 + 2 * k] - range[1 + 2 * k] + 1;
    }
    const uint32_t *runs = range + head;
    *nruns = (range_len - head) / 2;
    for (Py_ssize_t r = 0; r < *nruns; r++) {
        uint64_t start = runs[2 * r], end = r + 1 < *nruns ? runs[2 * r + 2] : places, first = runs[2 * r + 1];
        if ((r == 0 ? start != 0 : start <= runs[2 * r - 2]) || end <= start || end > places)
            return 0;
        uint64_t last = first + (end - start - 1);
        if (first != CODE_RANGE_NO_TEXT && (last > 0x10FFFF || (first <= 0xDFFF && last >= 0xD800)))
            return 0;
    }
    return 1;
}

/* Every entry of every node leads on (a later node), is the range's (where there is one) or ends
 * in a text that is there and is UTF-8. */
static int code_table_ok(const code_table_t *t) {
    for (Py_ssize_t node = 0; node < t->nnodes; node++)
        for (int b = 0; b < 256; b++) {
            uint32_t entry = t->nodes[node * 256 + b];
            Py_ssize_t child = entry & ~CODE_CHILD, at = entry >> CODE_TEXT_SHIFT, n = entry & CODE_TEXT_LENGTH;
            if (entry == CODE_RANGE ? t->range == NULL
                : entry & CODE_CHILD ? child <= node || child >= t->nnodes
                                     : entry && (entry > CODE_RANGE || n == 0 || at + n > t->texts_len ||
                                                 !utf8_valid(t->texts + at, n)))
                return 0;
        }
    return 1;
}

static void code_table_free(code_table_t *t) {
    PyMem_Free(t->nodes);
    PyMem_Free(t->texts);
    PyMem_Free(t->range);
}

int learn_code_table(int32_t number, const unsigned char *nodes, Py_ssize_t nodes_len, const unsigned char *texts,
                     Py_ssize_t texts_len, const unsigned char *range, Py_ssize_t range_len) {
    Py_ssize_t node_size = 256 * (Py_ssize_t)sizeof(uint32_t), word = (Py_ssize_t)sizeof(uint32_t);
    if (number < 0 || number >= (int32_t)CODE_TABLE_COUNT || nodes_len == 0 || nodes_len % node_size ||
        range_len % word)
        return 0;
    const code_table_t *known = code_table(number);
    if (known != NULL) /* learnt once: the programs that name it keep reading the same table */
        return known->nnodes * node_size == nodes_len && known->texts_len == texts_len &&
               known->range_len * word == range_len && memcmp(known->nodes, nodes, (size_t)nodes_len) == 0 &&
               (texts_len == 0 || memcmp(known->texts, texts, (size_t)texts_len) == 0) &&
               (range_len == 0 || memcmp(known->range, range, (size_t)range_len) == 0);
    code_table_t t = {PyMem_Malloc((size_t)nodes_len), nodes_len / node_size,
                      PyMem_Malloc(texts_len ? (size_t)texts_len : 1), texts_len, 0,
                      range_len ? PyMem_Malloc((size_t)range_len) : NULL, range_len / word, 0};
    if (t.nodes == NULL || t.texts == NULL || (range_len && t.range == NULL)) {
        code_table_free(&t);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(t.nodes, nodes, (size_t)nodes_len);
    if (texts_len)
        memcpy(t.texts, texts, (size_t)texts_len);
    if (range_len)
        memcpy(t.range, range, (size_t)range_len);
    if ((range_len && !range_ok(t.range, t.range_len, &t.nruns)) || !code_table_ok(&t)) {
        code_table_free(&t);
        return 0;
    }
    t.ascii = 1;
    for (int b = 0; b < 0x80 && t.ascii; b++) {
        bytes_t text;
        unsigned char one = (unsigned char)b, own[4];
        t.ascii = code_at(&t, &one, 1, &text, own) == 1 && text.n == 1 && text.p[0] == b;
    }
    code_tables[number] = t;
    return 1;
}

/* The strings from `first` to `first + count` are there. */
static int strings_ok(const strings_t *s, int32_t first, int32_t count) {
    return first >= 0 && count >= 0 && (int64_t)first + count <= s->n;
}

/* The 128 strings from `first` are the bytes 0x00-0x7F themselves (COL_ASCII's promise). */
static int ascii_kept(const strings_t *s, int32_t first) {
    if (!strings_ok(s, first, 0x80))
        return 0;
    for (int b = 0; b < 0x80; b++) {
        bytes_t ch = string_at(s, first + b);
        if (ch.n != 1 || ch.p[0] != b)
            return 0;
    }
    return 1;
}

/* A column reads exactly the bytes its op says (value() trusts the width for the op's own reads):
   the integer widths MySQL has, a DECIMAL of its precision and scale (at most 38 digits: an
   __int128), a fraction of at most 6 digits, a length prefix of 1-4 bytes, strings that are there,
   flags only where they hold (COL_ASCII: a TEXT8 table that keeps ASCII; COL_MASK, COL_HASH: its string
   there). */
static int column_ok(const column_t *c, const strings_t *strings) {
    int32_t bits = c->flags & ((1 << COL_STRING_SHIFT) - 1), string = c->flags >> COL_STRING_SHIFT;
    int shapes = !!(bits & COL_DROP) + !!(bits & COL_MASK) + !!(bits & COL_HASH);
    if (c->flags < 0 || bits & ~(COL_ASCII | COL_SHAPED) || shapes > 1 ||
        (bits & COL_ASCII && !(c->op == OP_TEXT8 && ascii_kept(strings, c->b))) ||
        (bits & (COL_MASK | COL_HASH) ? !strings_ok(strings, string, 1) : string != 0))
        return 0;
    switch (c->op) {
    case OP_INT:
        return c->width == 1 || c->width == 2 || c->width == 3 || c->width == 4 || c->width == 8;
    case OP_UINT:
        return c->width >= 1 && c->width <= 4;
    case OP_UINT64:
    case OP_DOUBLE:
    case OP_BIT64:
        return c->width == 8;
    case OP_FLOAT:
        return c->width == 4;
    case OP_DECIMAL:
        return c->a >= 1 && c->a <= (int)MAX_DECIMAL_DIGITS && c->b >= 0 && c->b <= c->a &&
               c->width == decimal_width(c->a, c->b);
    case OP_DATE:
        return c->width == 3;
    case OP_DATETIME2:
        return c->a >= 0 && c->a <= 6 && c->width == 5 + (c->a + 1) / 2;
    case OP_TIMESTAMP2:
        return c->a >= 0 && c->a <= 6 && c->width == 4 + (c->a + 1) / 2;
    case OP_TIME2:
        return c->a >= 0 && c->a <= 6 && c->width == 3 + (c->a + 1) / 2;
    case OP_YEAR:
        return c->width == 1;
    case OP_BIT:
        return c->width >= 1 && c->width <= 8;
    case OP_ENUM:
        return (c->width == 1 || c->width == 2) && strings_ok(strings, c->a, c->b);
    case OP_SET:
        return c->width >= 1 && c->width <= 8 && c->b <= 64 && strings_ok(strings, c->a, c->b);
    case OP_UTF8:
    case OP_JSON:
    case OP_GEOMETRY:
    case OP_VECTOR:
        return c->width == 0 && c->a >= 1 && c->a <= 4 && c->b == 0;
    case OP_BYTES:
        return c->width == 0 && c->a >= 1 && c->a <= 4 && c->b >= 0 && c->b <= MAX_PAD;
    case OP_TEXT8:
        return c->width == 0 && c->a >= 1 && c->a <= 4 && strings_ok(strings, c->b, 256);
    case OP_TEXTMB:
        return c->width == 0 && c->a >= 1 && c->a <= 4 && code_table(c->b) != NULL;
    case OP_WIDE:
        return c->width == 0 && c->a >= 1 && c->a <= 4 && c->b >= 0 && c->b < (int)WIDE_FORM_COUNT;
    }
    return 0;
}

/* Every column of a program can be walked (column_ok), and there is at least one, since a row
   of none takes no bytes and a walk over it would never move. */
static int program_ok(const column_t *cols, Py_ssize_t ncols, const strings_t *strings) {
    if (ncols == 0)
        return 0;
    for (Py_ssize_t i = 0; i < ncols; i++)
        if (!column_ok(&cols[i], strings))
            return 0;
    return 1;
}

static int keys_ok(const key_t_ *keys, Py_ssize_t nkeys, Py_ssize_t ncols) {
    for (Py_ssize_t k = 0; k < nkeys; k++)
        if (keys[k].column < 0 || keys[k].column >= ncols)
            return 0;
    return 1;
}

int program_read(const void *cols, Py_ssize_t cols_len, const void *keys, Py_ssize_t keys_len,
                 const unsigned char *strings, Py_ssize_t strings_len, program_t *prog) {
    prog->cols = cols, prog->ncols = cols_len / (Py_ssize_t)sizeof(column_t);
    prog->keys = keys, prog->nkeys = keys_len / (Py_ssize_t)sizeof(key_t_);
    return cols_len % (Py_ssize_t)sizeof(column_t) == 0 && keys_len % (Py_ssize_t)sizeof(key_t_) == 0 &&
           strings_of(strings, strings_len, &prog->strings) && program_ok(prog->cols, prog->ncols, &prog->strings) &&
           keys_ok(prog->keys, prog->nkeys, prog->ncols);
}

/* A column a [[kafka.columns]] rule shapes (COL_SHAPED) is among them: the JSON lines renderer
   (`sluice decode`, `tail`) writes none; canal-json's messages do (canal_rows). */
int program_shapes(const column_t *cols, Py_ssize_t ncols) {
    for (Py_ssize_t i = 0; i < ncols; i++)
        if (cols[i].flags & COL_SHAPED)
            return 1;
    return 0;
}

/* A column of a walk: a positive fixed width, or a length prefix of 1-4 bytes (rowplan.walk_layout);
   a table only where it checks codes (one learnt) or wide characters (a form). */
static int walk_ok(const walk_t *c) {
    int fixed = c->width > 0 && c->prefix == 0 && c->check == WALK_BYTES;
    int prefixed = c->width == 0 && c->prefix >= 1 && c->prefix <= 4 &&
                   (c->check == WALK_BYTES || c->check == WALK_UTF8 || c->check == WALK_JSON ||
                    c->check == WALK_FLOATS ||
                    (c->check == WALK_CODES && code_table(c->table) != NULL) ||
                    (c->check == WALK_WIDE && c->table >= 0 && c->table < (int)WIDE_FORM_COUNT));
    return (fixed || prefixed) && (c->check == WALK_CODES || c->check == WALK_WIDE || c->table == 0);
}

/* n bytes that are characters of a WIDE_FORMS form, one after another. */
static int wide_valid(int form, const unsigned char *s, Py_ssize_t n) {
    uint32_t cp;
    for (Py_ssize_t i = 0, width; i < n; i += width)
        if ((width = wide_step(form, s + i, n - i, &cp)) == 0)
            return 0;
    return 1;
}

/* n bytes that are codes of a code table, one after another. */
static int codes_valid(const code_table_t *t, const unsigned char *s, Py_ssize_t n) {
    bytes_t text;
    unsigned char own[4];
    for (Py_ssize_t i = 0, width; i < n; i += width)
        if ((width = text_step(t, s + i, n - i, &text, own)) == 0)
            return 0;
    return 1;
}

/* One image of a walk at *p; 0 if it does not fit. Each column moves on by its width or prefix. */
static int walk_image(const walk_t *cols, Py_ssize_t ncols, const unsigned char *s, Py_ssize_t *at, Py_ssize_t end) {
    Py_ssize_t p = *at, nbytes = (ncols + 7) / 8;
    if (end - p < nbytes)
        return 0;
    const unsigned char *bitmap = s + p;
    p += nbytes;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (bitmap[i >> 3] >> (i & 7) & 1)
            continue;
        Py_ssize_t n = cols[i].width;
        if (cols[i].prefix) {
            if (end - p < cols[i].prefix)
                return 0;
            n = (Py_ssize_t)le(s + p, cols[i].prefix);
            p += cols[i].prefix;
        }
        if (n > end - p || (cols[i].check == WALK_UTF8 && !utf8_valid(s + p, n)) ||
            (cols[i].check == WALK_JSON && !jsonb_ok(s + p, n)) || (cols[i].check == WALK_FLOATS && n % 4) ||
            (cols[i].check == WALK_CODES && !codes_valid(code_table(cols[i].table), s + p, n)) ||
            (cols[i].check == WALK_WIDE && !wide_valid(cols[i].table, s + p, n)))
            return 0;
        p += n;
    }
    *at = p;
    return 1;
}

Py_ssize_t walk_rows(const walk_t *cols, Py_ssize_t ncols, const unsigned char *s, Py_ssize_t end, int images) {
    if (images != 1 && images != 2)
        return -1;
    for (Py_ssize_t i = 0; i < ncols; i++) /* every step moves on: a fixed width or a 1-4 byte prefix */
        if (!walk_ok(&cols[i]))
            return -1;
    if (ncols == 0)
        return end > 0 ? -1 : 0; /* images of no columns take no bytes: these bytes fit nothing */
    Py_ssize_t p = 0, rows = 0;
    while (p < end) { /* each image moves p on by its bitmap's byte at least */
        for (int img = 0; img < images; img++)
            if (!walk_image(cols, ncols, s, &p, end))
                return -1;
        rows++;
    }
    return rows;
}
