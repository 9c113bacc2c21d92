/* Row images -> canal's strings, as the compact JSON objects of JSON lines (`sluice decode`, `tail`).
 *
 * The program is the transcoder's (connector/avro/transcode.column_op reads it off the binlog's
 * columns alone); the values are rendered as the Python path renders the decoded values
 * (connector/flat.py's renderers over connector/binlog/values.py's text decoders) and escaped as
 * json.encoder.encode_basestring escapes them (ensure_ascii off): each row's `data` object, and an
 * UPDATE's `old` of the columns whose text changed. Anything it does not render exactly as Python
 * does (a float that is not finite, a DATETIME before year 0, an ENUM index past its labels, text
 * its charset refuses, images that do not fit) is declined, and the caller takes the Python path.
 * canal-json's messages (canal_rows) also write a table a [[kafka.columns]] rule shapes: a dropped
 * column left out, a masked one's mask and a hashed one's digest in place of its text (the flags of
 * native_spec.COLUMN_FLAGS, as the Avro transcoder reads them).
 * tests/test_corpus.py holds it to the messages encoded one by one on every rows event of the
 * corpus; tests/test_native_fuzz.py's boundary target calls it with any arguments.
 */
#include "native.h"

#include <stdio.h>

static int put_text(buf_t *out, const char *text) { return buf_put(out, text, (Py_ssize_t)strlen(text)); }

/* y-m-d (width 4, sep '-') or h:m:s (width 2, sep ':'), as "%04llu-%02llu-%02llu" and
 * "%02llu:%02llu:%02llu" print them: digits_before, not printf, on the per-row path. */
static int put_triple(buf_t *out, uint64_t a, int width, char sep, uint64_t b, uint64_t c) {
    return buf_padded(out, a, width) < 0 || buf_put(out, &sep, 1) < 0 || buf_padded(out, b, 2) < 0 ||
                   buf_put(out, &sep, 1) < 0 || buf_padded(out, c, 2) < 0
               ? -1
               : 0;
}

/* "y-m-d h:m:s" */
static int put_date_time(buf_t *out, uint64_t y, uint64_t mo, uint64_t d, uint64_t h, uint64_t mi, uint64_t s) {
    return put_triple(out, y, 4, '-', mo, d) < 0 || buf_put(out, " ", 1) < 0 ? -1 : put_triple(out, h, 2, ':', mi, s);
}

/* A byte that is not plain as JSON escapes it in two characters, or NULL: as \u00XX. */
static const char *two_escape(unsigned char c) {
    return c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
         : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
}

/* UTF-8 text as a JSON string's inside, as encode_basestring escapes it: runs of plain bytes
 * copied at once, the others escaped. */
int put_escaped(buf_t *out, const unsigned char *s, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    if (n == 0) /* text not kept yet has no bytes: NULL + 0 is undefined */
        return 0;
    Py_ssize_t run = 0; /* the first plain byte not put yet */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (plain(c))
            continue;
        if (buf_put(out, s + run, i - run) < 0)
            return -1;
        run = i + 1;
        const char *two = two_escape(c);
        if (two != NULL) {
            if (buf_put(out, two, 2) < 0)
                return -1;
        } else {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            if (buf_put(out, u, 6) < 0)
                return -1;
        }
    }
    return buf_put(out, s + run, n - run);
}

/* -- each op's text (what flat.py's renderer prints of the decoded value) ------------------------ */

static int put_repr(buf_t *out, double d) {
    char *repr = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (repr == NULL)
        return -1;
    int r = put_text(out, repr);
    PyMem_Free(repr);
    return r;
}

/* flat.float32_text: the fewest %g digits whose double packs (struct "<f") to the same 32 bits,
 * printed as that double's repr; none of 1-9: the value's repr. Python's own formatting and packing. */
static int put_float32(buf_t *out, const unsigned char *bits) {
    float f;
    memcpy(&f, bits, 4);
    for (int digits = 1; digits < 10; digits++) {
        char *text = PyOS_double_to_string((double)f, 'g', digits, 0, NULL);
        if (text == NULL)
            return -1;
        double d = PyOS_string_to_double(text, NULL, NULL);
        PyMem_Free(text);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        unsigned char packed[4];
        if (PyFloat_Pack4(d, (char *)packed, 1) < 0) { /* OverflowError: the next digit count */
            PyErr_Clear();
            continue;
        }
        if (memcmp(packed, bits, 4) == 0)
            return put_repr(out, d);
    }
    return put_repr(out, (double)f);
}

/* values.decimal_text_decoder: the sign, the integer groups (the first one %d, the others %09d)
 * without leading zeros, then the fraction's groups (%09d, the last %0Nd). */
static int put_decimal(buf_t *out, const unsigned char *p, int precision, int scale) {
    unsigned char raw[32];
    int negative = decimal_magnitude(p, decimal_width(precision, scale), raw), intg = precision - scale, at = 0;
    char whole[96], frac[96];
    int nw = 0, nf = 0;
    if (intg % 9) {
        nw += padded_digits(whole, be(raw, DIG2BYTES[intg % 9]), 1);
        at += DIG2BYTES[intg % 9];
    }
    for (int k = 0; k < intg / 9; k++, at += 4)
        nw += padded_digits(whole + nw, be(raw + at, 4), 9);
    for (int k = 0; k < scale / 9; k++, at += 4)
        nf += padded_digits(frac + nf, be(raw + at, 4), 9);
    if (scale % 9)
        nf += padded_digits(frac + nf, be(raw + at, DIG2BYTES[scale % 9]), scale % 9);
    int start = 0;
    while (start < nw && whole[start] == '0')
        start++;
    if ((negative && buf_put(out, "-", 1) < 0) ||
        (start == nw ? buf_put(out, "0", 1) : buf_put(out, whole + start, nw - start)) < 0)
        return -1;
    return scale && (buf_put(out, ".", 1) < 0 || buf_put(out, frac, nf) < 0) ? -1 : 0;
}

/* values._fraction_layout: fsp digits of the fraction (odd fsp: stored with one more digit). */
static int put_fraction(buf_t *out, uint64_t frac, int fsp) {
    if (fsp <= 0)
        return 0;
    return buf_put(out, ".", 1) < 0 ? -1 : buf_padded(out, fsp % 2 ? frac / 10 : frac, fsp);
}

/* Days since 1970-01-01 -> the civil date (Howard Hinnant's civil_from_days). */
static void civil(int64_t days, int64_t *y, unsigned *m, unsigned *d) {
    days += 719468;
    int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    unsigned doe = (unsigned)(days - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

/* values.timestamp2_decoder: the UTC time of its seconds ("0000-00-00 00:00:00" for second 0 with no
 * fraction: MariaDB stores 1970-01-01 00:00:00.5 as second 0 with one), its fraction. */
static int put_timestamp2(buf_t *out, const unsigned char *v, int fsp) {
    int64_t seconds = (int64_t)be(v, 4);
    uint64_t fraction = fsp > 0 ? be(v + 4, (fsp + 1) / 2) : 0;
    int r;
    if (seconds == 0 && fraction / (fsp % 2 ? 10 : 1) == 0) {
        r = put_text(out, "0000-00-00 00:00:00");
    } else {
        int64_t y;
        unsigned m, d;
        civil(seconds / 86400, &y, &m, &d);
        int64_t rest = seconds % 86400;
        r = put_date_time(out, (uint64_t)y, m, d, (uint64_t)rest / 3600, (uint64_t)rest / 60 % 60, (uint64_t)rest % 60);
    }
    return r < 0 ? -1 : put_fraction(out, fraction, fsp);
}

/* values.datetime2_decoder; a packed value below zero (before year 0) prints with Python's floor
 * arithmetic: declined. */
static int put_datetime2(buf_t *out, const unsigned char *v, int fsp) {
    int64_t packed = (int64_t)be(v, 5) - 0x8000000000LL;
    if (packed < 0)
        return DECLINE;
    int64_t ymd = packed >> 17, hms = packed & 0x1FFFF, ym = ymd >> 5;
    if (put_date_time(out, (uint64_t)(ym / 13), (uint64_t)(ym % 13), (uint64_t)(ymd & 31), (uint64_t)(hms >> 12),
                      (uint64_t)(hms >> 6 & 63), (uint64_t)(hms & 63)) < 0 ||
        put_fraction(out, fsp > 0 ? be(v + 5, (fsp + 1) / 2) : 0, fsp) < 0)
        return FAIL;
    return DONE;
}

/* values.decode_time2: the sign, then h:m:s of the magnitude and its fraction ("%06d" cut to fsp). */
static int put_time2(buf_t *out, const unsigned char *v, int fsp) {
    int64_t packed = time2_packed(v, fsp);
    uint64_t magnitude = packed < 0 ? (uint64_t)0 - (uint64_t)packed : (uint64_t)packed;
    uint64_t hms = magnitude >> 24, micros = magnitude & 0xFFFFFF;
    if ((packed < 0 && buf_put(out, "-", 1) < 0) ||
        put_triple(out, hms >> 12 & 0x3FF, 2, ':', hms >> 6 & 63, hms & 63) < 0)
        return -1;
    if (fsp <= 0)
        return 0;
    char digits[20];
    padded_digits(digits, micros, 6);
    return buf_put(out, ".", 1) < 0 || buf_put(out, digits, fsp) < 0 ? -1 : 0;
}

/* A label (ENUM, SET) or a charset's character, escaped. */
static int put_string(buf_t *out, bytes_t s) { return put_escaped(out, s.p, s.n); }

/* The text flat.py's renderer printed of a float (Python's repr), from `mark` on in out, rewritten as
 * canal.java_float_text rewrites it: Java's Double.toString form of the same digits, plain from 10^-3
 * up to 10^7 (at least one decimal), else d.dddE[-]n. */
static int java_float(buf_t *out, Py_ssize_t mark) {
    const char *t = out->data + mark, *end = out->data + out->len;
    char digits[40], text[80];
    int nd = 0, negative = *t == '-', point = -1, exponent = 0, n = 0;
    t += negative;
    for (; t < end && *t != 'e'; t++) { /* repr: digits, one point, at most 17 significant digits */
        if (*t == '.')
            point = nd;
        else if (nd < (int)sizeof digits)
            digits[nd++] = *t;
        else
            return DECLINE;
    }
    if (t < end) { /* e[+-]dd */
        int sign = t + 1 < end && t[1] == '-' ? -1 : 1;
        for (t += 2; t < end; t++)
            exponent = exponent * 10 + (*t - '0');
        exponent *= sign;
    }
    if (point < 0)
        point = nd;
    int first = 0, last = nd; /* the significant digits: digits[first..last) */
    while (first < nd && digits[first] == '0')
        first++;
    while (last > first && digits[last - 1] == '0')
        last--;
    if (negative)
        text[n++] = '-';
    if (first == last) { /* zero */
        memcpy(text + n, "0.0", 3);
        n += 3;
    } else {
        int e = point - first - 1 + exponent, count = last - first; /* value = d.ddd x 10^e */
        const char *d = digits + first;
        if (e >= -3 && e < 7) {
            if (e >= 0) {
                for (int i = 0; i <= e; i++)
                    text[n++] = i < count ? d[i] : '0';
                text[n++] = '.';
                if (count > e + 1) {
                    memcpy(text + n, d + e + 1, (size_t)(count - e - 1));
                    n += count - e - 1;
                } else {
                    text[n++] = '0';
                }
            } else {
                text[n++] = '0', text[n++] = '.';
                for (int i = 0; i < -e - 1; i++)
                    text[n++] = '0';
                memcpy(text + n, d, (size_t)count);
                n += count;
            }
        } else {
            text[n++] = d[0], text[n++] = '.';
            if (count > 1) {
                memcpy(text + n, d + 1, (size_t)(count - 1));
                n += count - 1;
            } else {
                text[n++] = '0';
            }
            n += snprintf(text + n, sizeof text - (size_t)n, "E%d", e);
        }
    }
    out->len = mark;
    return buf_put(out, text, n) < 0 ? FAIL : DONE;
}

/* Bytes one character each (latin-1), as canal prints binary values, as a JSON string's inside. */
static int put_latin1(buf_t *out, bytes_t text) {
    for (Py_ssize_t i = 0; i < text.n; i++) {
        unsigned char ch = text.p[i], two[2] = {(unsigned char)(0xC0 | ch >> 6), (unsigned char)(0x80 | (ch & 0x3F))};
        if ((ch < 0x80 ? put_escaped(out, &ch, 1) : buf_put(out, two, 2)) < 0)
            return -1;
    }
    return 0;
}

/* A VECTOR's canal text (canal._vector_bytes): each float as the Python path has it (vector_float:
 * its "%.5e" text read back and packed again), the bytes one character each. Declined: a value that is
 * not whole floats (values.decode_vector raises), a NaN. */
static int put_vector(buf_t *out, bytes_t floats) {
    if (floats.n % 4)
        return DECLINE;
    for (Py_ssize_t i = 0; i < floats.n; i += 4) {
        unsigned char packed[4];
        int r = vector_float(floats.p + i, packed);
        if (r != DONE)
            return r;
        if (put_latin1(out, (bytes_t){packed, 4}) < 0)
            return FAIL;
    }
    return DONE;
}

/* Canal's (Kafka) text of the ops whose text differs from flat.py's (canal._renderer): a float's
 * in Java's form, an ENUM's index, a SET's bit mask, a GEOMETRY's bytes one character each, a
 * VECTOR's floats from their six-digit text (put_vector). -1: an op whose text is flat.py's. */
static int canal_cell(const column_t *c, const unsigned char *v, Py_ssize_t room, buf_t *out, Py_ssize_t *used) {
    bytes_t text;
    int r;
    switch (c->op) {
    case OP_ENUM: {
        uint64_t index = le(v, c->width);
        if (index > (uint64_t)c->b)
            return DECLINE; /* values.decode_enum raises */
        return buf_padded(out, index, 1) < 0 ? FAIL : DONE;
    }
    case OP_SET: {
        uint64_t mask = le(v, c->width);
        if (c->b < 64)
            mask &= ((uint64_t)1 << c->b) - 1; /* bits past the labels: decode_set names none */
        return buf_padded(out, mask, 1) < 0 ? FAIL : DONE;
    }
    case OP_GEOMETRY:
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        return put_latin1(out, text) < 0 ? FAIL : DONE;
    case OP_VECTOR:
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        return put_vector(out, text);
    }
    return -1;
}

/* One value's text (its JSON string's inside; numbers too: canal's values are all strings);
 * `canal`: canal's Kafka texts (canal_cell) where they differ from flat.py's. */
static int cell(const column_t *c, const strings_t *strings, const unsigned char *v, Py_ssize_t room, buf_t *out,
                Py_ssize_t *used, int canal) {
    bytes_t text;
    int r;
    *used = c->width;
    if (room < c->width) /* a length-prefixed op's width is 0 (column_ok): its prefix is checked below */
        return DECLINE;
    if (canal) {
        Py_ssize_t mark = out->len;
        if ((r = canal_cell(c, v, room, out, used)) >= 0)
            return r;
        if (c->op == OP_FLOAT || c->op == OP_DOUBLE) {
            r = cell(c, strings, v, room, out, used, 0);
            return r == DONE ? java_float(out, mark) : r;
        }
    }
    switch (c->op) {
    case OP_INT:
        return buf_int_text(out, signed_of(le(v, c->width), c->width)) < 0 ? FAIL : DONE;
    case OP_UINT:
    case OP_UINT64:
        return buf_padded(out, le(v, c->width), 1) < 0 ? FAIL : DONE;
    case OP_BIT:
    case OP_BIT64:
        return buf_padded(out, be(v, c->width), 1) < 0 ? FAIL : DONE;
    case OP_FLOAT:
    case OP_DOUBLE: {
        int special = c->op == OP_FLOAT ? ((v[3] & 0x7F) << 1 | v[2] >> 7) == 0xFF
                                        : ((v[7] & 0x7F) << 4 | v[6] >> 4) == 0x7FF;
        if (special) /* nan and inf: Python's */
            return DECLINE;
        if (c->op == OP_FLOAT)
            return put_float32(out, v) < 0 ? FAIL : DONE;
        double d;
        memcpy(&d, v, 8);
        return put_repr(out, d) < 0 ? FAIL : DONE;
    }
    case OP_DECIMAL:
        return put_decimal(out, v, c->a, c->b) < 0 ? FAIL : DONE;
    case OP_DATE: {
        uint64_t d = le(v, 3);
        return put_triple(out, d >> 9, 4, '-', d >> 5 & 15, d & 31) < 0 ? FAIL : DONE;
    }
    case OP_DATETIME2:
        return put_datetime2(out, v, c->a);
    case OP_TIMESTAMP2:
        return put_timestamp2(out, v, c->a) < 0 ? FAIL : DONE;
    case OP_TIME2:
        return put_time2(out, v, c->a) < 0 ? FAIL : DONE;
    case OP_YEAR:
        return buf_padded(out, v[0] ? 1900 + (uint64_t)v[0] : 0, 4) < 0 ? FAIL : DONE;
    case OP_ENUM: {
        uint64_t index = le(v, c->width);
        if (index > (uint64_t)c->b)
            return DECLINE; /* values.decode_enum raises */
        return index && put_string(out, string_at(strings, c->a + (Py_ssize_t)index - 1)) < 0 ? FAIL : DONE;
    }
    case OP_SET: {
        uint64_t mask = le(v, c->width);
        for (int i = 0, put = 0; i < c->b; i++)
            if (mask >> i & 1 && ((put++ && buf_put(out, ",", 1) < 0) || put_string(out, string_at(strings, c->a + i)) < 0))
                return FAIL;
        return DONE;
    }
    case OP_UTF8:
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        if (!utf8_valid(text.p, text.n))
            return DECLINE;
        return put_escaped(out, text.p, text.n) < 0 ? FAIL : DONE;
    case OP_BYTES: /* one character per byte (latin-1), as canal prints binary values; BINARY(n) padded */
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        if (put_latin1(out, text) < 0)
            return FAIL;
        for (Py_ssize_t i = text.n; i < c->b; i++) /* the 0x00 pad the binlog leaves out (rowcodec) */
            if (buf_put(out, "\\u0000", 6) < 0)
                return FAIL;
        return DONE;
    case OP_JSON: { /* the document's text, as a JSON string's inside */
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        buf_t json = {NULL, 0, 0};
        r = jsonb_text(text.p, text.n, &json);
        if (r == DONE)
            r = put_escaped(out, (const unsigned char *)json.data, json.len) < 0 ? FAIL : DONE;
        PyMem_Free(json.data);
        return r;
    }
    case OP_TEXT8:
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        Py_ssize_t run = 0; /* the first byte not put yet of a run that is its own plain text */
        int ascii = c->flags & COL_ASCII; /* bytes below 0x80 are their own text: no look-up */
        for (Py_ssize_t i = 0; i < text.n; i++) {
            unsigned char b = text.p[i];
            if (ascii && b < 0x80 && plain(b))
                continue;
            bytes_t ch = string_at(strings, c->b + b);
            if (ch.n == 1 && ch.p[0] == b && plain(b))
                continue; /* ASCII the charset keeps (most single-byte charsets: all of it) */
            if (ch.n == 0)
                return DECLINE; /* a byte the charset does not map: its decoder raises */
            if (buf_put(out, text.p + run, i - run) < 0 || put_string(out, ch) < 0)
                return FAIL;
            run = i + 1;
        }
        return buf_put(out, text.p + run, text.n - run) < 0 ? FAIL : DONE;
    case OP_TEXTMB: {
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        const code_table_t *t = code_table(c->b);
        Py_ssize_t start = 0, width; /* as OP_TEXT8's run */
        for (Py_ssize_t i = 0; i < text.n; i += width) {
            bytes_t ch;
            unsigned char own[4];
            if ((width = code_at(t, text.p + i, text.n - i, &ch, own)) == 0)
                return DECLINE; /* no code starts here: its decoder raises */
            if (width == 1 && ch.n == 1 && ch.p[0] == text.p[i] && plain(text.p[i]))
                continue;
            if (buf_put(out, text.p + start, i - start) < 0 || put_string(out, ch) < 0)
                return FAIL;
            start = i + width;
        }
        return buf_put(out, text.p + start, text.n - start) < 0 ? FAIL : DONE;
    }
    case OP_WIDE: {
        if ((r = prefixed(c, v, room, &text, used)) != DONE)
            return r;
        uint32_t cp;
        unsigned char utf8[4];
        for (Py_ssize_t i = 0, width; i < text.n; i += width) {
            if ((width = wide_step(c->b, text.p + i, text.n - i, &cp)) == 0)
                return DECLINE; /* where the rows decoder raises */
            if (put_escaped(out, utf8, utf8_of(cp, utf8)) < 0)
                return FAIL;
        }
        return DONE;
    }
    }
    return DECLINE;
}

/* cell's text with put_escaped's escapes undone: the value's text as the flat message holds it,
 * appended to out; *used: the bytes of the image it read. */
static int canal_text(const column_t *c, const strings_t *strings, const unsigned char *v, Py_ssize_t room,
                      buf_t *out, Py_ssize_t *used) {
    Py_ssize_t mark = out->len;
    int r = cell(c, strings, v, room, out, used, 0);
    if (r != DONE)
        return r;
    unsigned char *t = (unsigned char *)out->data + mark;
    Py_ssize_t n = out->len - mark, kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* every escape is whole: put_escaped wrote it */
        if (t[i] != '\\' || i + 1 >= n) {
            t[kept++] = t[i];
            continue;
        }
        int byte = -1;
        if (t[i + 1] == 'u' && i + 5 < n) { /* \u00XX: a control character */
            byte = 0;
            for (int k = 2; k < 6; k++)
                byte = byte * 16 + (t[i + k] <= '9' ? t[i + k] - '0' : t[i + k] - 'a' + 10);
            i += 5;
        } else {
            for (int b = 0; b <= '\\' && byte < 0; b++) { /* the byte two_escape writes this way */
                const char *two = two_escape((unsigned char)b);
                if (two != NULL && two[1] == t[i + 1])
                    byte = b;
            }
            i += 1;
        }
        if (byte < 0)
            return DECLINE; /* not reached: put_escaped writes no other backslash */
        t[kept++] = (unsigned char)byte;
    }
    out->len = mark + kept;
    return DONE;
}

/* A hashed column's (COL_HASH) digest: the hex SHA-256 of the salt (the program's string) and the
 * value's canal_text, as connector/columns.py hashes the flat message's text. The text is put in
 * scratch while it is hashed and taken out again; *used: the image's bytes read. */
int salted_digest(const column_t *c, const strings_t *strings, const unsigned char *v, Py_ssize_t room,
                  buf_t *scratch, Py_ssize_t *used, char hex[64]) {
    Py_ssize_t mark = scratch->len;
    int r = canal_text(c, strings, v, room, scratch, used);
    if (r != DONE)
        return r;
    bytes_t salt = string_at(strings, c->flags >> COL_STRING_SHIFT);
    sha256_hex(salt.p, salt.n, (const unsigned char *)scratch->data + mark, scratch->len - mark, hex, 0);
    scratch->len = mark;
    return DONE;
}

/* -- rows ------------------------------------------------------------------------------------- */

typedef struct {
    Py_ssize_t start, end; /* a value's text in the row's text buffer; start < 0: NULL */
} mark_t;

/* A column a [[kafka.columns]] rule hashes (COL_HASH): its digest (salted_digest) is the mark's
 * text, so an UPDATE's `old` compares digests. */
static int hashed(const column_t *c, const strings_t *strings, const unsigned char *v, Py_ssize_t room, buf_t *texts,
                  Py_ssize_t *used) {
    char hex[64];
    int r = salted_digest(c, strings, v, room, texts, used, hex);
    if (r != DONE)
        return r;
    return buf_put(texts, hex, sizeof hex) < 0 ? FAIL : DONE;
}

/* One image's values' texts, one after another in texts, marked per column (a hashed column's: its
 * digest; a masked one's: its own text, which an UPDATE's `old` compares, the mask written out). */
static int image_texts(const program_t *prog, const unsigned char *s, Py_ssize_t *pos, Py_ssize_t end, buf_t *texts,
                       mark_t *marks, int canal) {
    Py_ssize_t ncols = prog->ncols, nbytes = (ncols + 7) / 8, p = *pos;
    if (end - p < nbytes)
        return DECLINE;
    const unsigned char *bitmap = s + p;
    p += nbytes;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (bitmap[i >> 3] >> (i & 7) & 1) {
            marks[i].start = -1;
            continue;
        }
        Py_ssize_t used;
        const column_t *c = &prog->cols[i];
        marks[i].start = texts->len;
        int r = c->flags & COL_HASH ? hashed(c, &prog->strings, s + p, end - p, texts, &used)
                                    : cell(c, &prog->strings, s + p, end - p, texts, &used, canal);
        if (r != DONE)
            return r;
        marks[i].end = texts->len;
        p += used;
    }
    *pos = p;
    return DONE;
}

/* A value's JSON: its text quoted (escaped already), or null; a masked column's (COL_MASK) mask, the
 * program's string, in place of its text. */
static int put_value(buf_t *out, const program_t *prog, Py_ssize_t i, const buf_t *texts, const mark_t *m) {
    if (m->start < 0)
        return buf_put(out, "null", 4);
    const column_t *c = &prog->cols[i];
    bytes_t text = {(const unsigned char *)texts->data + m->start, m->end - m->start};
    if (c->flags & COL_MASK)
        text = string_at(&prog->strings, c->flags >> COL_STRING_SHIFT);
    return buf_put(out, "\"", 1) < 0 || buf_put(out, text.p, text.n) < 0 || buf_put(out, "\"", 1) < 0 ? -1 : 0;
}

/* Whether two marks hold the same text (both NULL, or equal bytes). */
static int same_text(const buf_t *texts, const mark_t *a, const mark_t *b) {
    if (a->start < 0 || b->start < 0)
        return a->start < 0 && b->start < 0;
    return a->end - a->start == b->end - b->start &&
           memcmp(texts->data + a->start, texts->data + b->start, (size_t)(a->end - a->start)) == 0;
}

/* {"name":"text",...} of every column's text in marks but a dropped one's (COL_DROP); `other`: only
 * those whose text differs there (an UPDATE's `old`: the columns whose text it changed). names: each
 * column's JSON key and colon. */
static int object(const program_t *prog, const buf_t *texts, const mark_t *marks, const mark_t *other,
                  const bytes_t *names, buf_t *json) {
    if (buf_put(json, "{", 1) < 0)
        return -1;
    int first = 1;
    for (Py_ssize_t i = 0; i < prog->ncols; i++) {
        const mark_t *m = &marks[i];
        if (prog->cols[i].flags & COL_DROP || (other != NULL && same_text(texts, m, &other[i])))
            continue;
        if ((!first && buf_put(json, ",", 1) < 0) || buf_put(json, names[i].p, names[i].n) < 0 ||
            put_value(json, prog, i, texts, m) < 0)
            return -1;
        first = 0;
    }
    return buf_put(json, "}", 1);
}

static PyObject *json_text(const buf_t *json) { return PyUnicode_DecodeUTF8(json->data, json->len, NULL); }

/* A rows event's images read row by row into texts: each row's (the before image's, for an UPDATE)
 * marks in marks, an UPDATE's after image's in marks + ncols; names: each column's JSON key. */
typedef struct {
    buf_t texts;
    mark_t *marks;
    bytes_t *names;
    Py_ssize_t pos; /* the next row's first byte */
} reader_t;

/* 0, or -1 with a Python error set (reader_close frees what it got either way). */
static int reader_open(reader_t *rd, Py_ssize_t ncols) {
    *rd = (reader_t){{0}, NULL, NULL, 0};
    rd->marks = PyMem_Calloc((size_t)ncols * 2, sizeof(mark_t));
    rd->names = PyMem_Calloc((size_t)ncols, sizeof(bytes_t));
    if (rd->marks == NULL || rd->names == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return buf_reserve(&rd->texts, 64); /* first: a row of empty texts then still points its marks into it */
}

static void reader_close(reader_t *rd) {
    PyMem_Free(rd->texts.data);
    PyMem_Free(rd->marks);
    PyMem_Free(rd->names);
}

/* The next row's images' texts (flat.py's, or with `canal` canal's Kafka texts): DONE, DECLINE or FAIL.
 * Each image moves pos on by at least its bitmap's byte. */
static int next_row(const program_t *prog, reader_t *rd, const unsigned char *s, Py_ssize_t end, int kind, int canal) {
    rd->texts.len = 0;
    int r = image_texts(prog, s, &rd->pos, end, &rd->texts, rd->marks, canal);
    if (r == DONE && kind == KIND_UPDATE)
        r = image_texts(prog, s, &rd->pos, end, &rd->texts, rd->marks + prog->ncols, canal);
    return r;
}

/* Every row's `data` JSON (and an UPDATE's `old`) into `out`: DONE, DECLINE or FAIL. */
int json_rows(const program_t *prog, PyObject *names, const unsigned char *s, Py_ssize_t end, int kind,
              PyObject *out) {
    Py_ssize_t ncols = prog->ncols;
    if (ncols < 1 || PyTuple_GET_SIZE(names) != ncols)
        return DECLINE;
    reader_t rd;
    buf_t json = {0}, old = {0};
    int r = reader_open(&rd, ncols) < 0 ? FAIL : DONE;
    for (Py_ssize_t i = 0; r == DONE && i < ncols; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        rd.names[i] = (bytes_t){(const unsigned char *)PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)};
    }
    while (r == DONE && rd.pos < end && (r = next_row(prog, &rd, s, end, kind, 0)) == DONE) {
        const mark_t *after = rd.marks + ncols, *data = kind == KIND_UPDATE ? after : rd.marks;
        PyObject *item = NULL;
        json.len = old.len = 0;
        if (object(prog, &rd.texts, data, NULL, rd.names, &json) < 0 ||
            (kind == KIND_UPDATE && object(prog, &rd.texts, rd.marks, after, rd.names, &old) < 0)) {
            r = FAIL;
            break;
        }
        if (kind == KIND_UPDATE) {
            PyObject *a = json_text(&json), *b = a ? json_text(&old) : NULL;
            item = b ? PyTuple_Pack(2, a, b) : NULL;
            Py_XDECREF(a);
            Py_XDECREF(b);
        } else {
            item = json_text(&json);
        }
        if (item == NULL || PyList_Append(out, item) < 0)
            r = FAIL;
        Py_XDECREF(item);
    }
    reader_close(&rd);
    PyMem_Free(json.data);
    PyMem_Free(old.data);
    return r;
}

/* -- canal-json's messages (connector/canal.py) ---------------------------------------------------- */

/* Whether an UNSIGNED value's text is above its width's signed maximum (sqltypes.CanalType.limit). */
static int wider(const buf_t *texts, const mark_t *m, int32_t width) {
    uint64_t u = 0;
    for (Py_ssize_t i = m->start; i < m->end; i++)
        u = u * 10 + (uint64_t)(texts->data[i] - '0');
    return width >= 1 && width <= 8 && u > ((uint64_t)1 << (8 * width - 1)) - 1;
}

/* `old`'s object of one row: the before image's columns whose text the after image changed, or all. */
static int old_object(const program_t *prog, const canal_t *canal, const bytes_t *names, const buf_t *texts,
                      const mark_t *data, const mark_t *before, buf_t *out) {
    return object(prog, texts, before, canal->full_old ? NULL : data, names, out);
}

/* From the event's fields after `old` to the end: the statement's text part (`sql`), the sqlType codes
 * of the row in data (the last row of a message, as MQMessageUtils leaves them), the event's last fields. */
static int canal_end(const program_t *prog, const canal_t *canal, const bytes_t *names, const buf_t *texts,
                     const mark_t *data, const bytes_t *sql, buf_t *out) {
    if (buf_put(out, sql->p, sql->n) < 0 || buf_put(out, "{", 1) < 0)
        return -1;
    for (Py_ssize_t i = 0, put = 0; i < prog->ncols; i++) {
        if (prog->cols[i].flags & COL_DROP)
            continue;
        const sqltype_t *t = &canal->types[i];
        int32_t code = t->value;
        if (data[i].start < 0)
            code = t->null;
        else if (t->wider != t->value && wider(texts, &data[i], prog->cols[i].width))
            code = t->wider;
        if ((put++ && buf_put(out, ",", 1) < 0) || buf_put(out, names[i].p, names[i].n) < 0 ||
            buf_int_text(out, code) < 0)
            return -1;
    }
    return buf_put(out, "}", 1) < 0 || buf_put(out, canal->tail.p, canal->tail.n) < 0 ? -1 : 0;
}

/* One row's FlatMessage: its `data`, the event's fields up to `old`, its `old`, the event's fields up to
 * `sqlType` (the statement's text on the first row only), its sqlType codes, the event's last fields. */
static int canal_value(const program_t *prog, const canal_t *canal, const bytes_t *names, const buf_t *texts,
                       const mark_t *data, const mark_t *before, int first, buf_t *out) {
    out->len = 0;
    if (buf_put(out, "{\"data\":[", 9) < 0 || object(prog, texts, data, NULL, names, out) < 0 ||
        buf_put(out, canal->middle.p, canal->middle.n) < 0)
        return -1;
    if (before == NULL ? buf_put(out, "null", 4) < 0
                       : buf_put(out, "[", 1) < 0 || old_object(prog, canal, names, texts, data, before, out) < 0 ||
                             buf_put(out, "]", 1) < 0)
        return -1;
    return canal_end(prog, canal, names, texts, data, first ? &canal->first_sql : &canal->rest_sql, out);
}

/* The key: {"name":"text",...} of the key's columns in the data image. */
static int canal_key(const program_t *prog, const bytes_t *names, const buf_t *texts, const mark_t *data, buf_t *out) {
    out->len = 0;
    if (buf_put(out, "{", 1) < 0)
        return -1;
    for (Py_ssize_t k = 0; k < prog->nkeys; k++) {
        Py_ssize_t i = prog->keys[k].column;
        const mark_t *m = &data[i];
        if ((k && buf_put(out, ",", 1) < 0) || buf_put(out, names[i].p, names[i].n) < 0 ||
            put_value(out, prog, i, texts, m) < 0)
            return -1;
    }
    return buf_put(out, "}", 1);
}

int canal_ok(const column_t *cols, Py_ssize_t ncols, const strings_t *names, const sqltype_t *types,
             Py_ssize_t types_len) {
    if (names->n != ncols || types_len != ncols * (Py_ssize_t)sizeof(sqltype_t))
        return 0;
    for (Py_ssize_t i = 0; i < ncols; i++)
        if (types[i].wider != types[i].value && cols[i].op != OP_UINT && cols[i].op != OP_UINT64)
            return 0;
    return 1;
}

/* message_rows = "event": the event's rows in one message with no key, as CanalJsonEncoder.document
 * writes a list of messages: every row's `data`, every row's `old` (an UPDATE's; null for the others),
 * the statement's text, the last row's sqlType codes. A key that moves stays in its one message. */
static int canal_event(const program_t *prog, const canal_t *canal, reader_t *rd, const unsigned char *s,
                       Py_ssize_t end, int kind, emit_fn emit, void *ctx, Py_ssize_t *rows) {
    buf_t value = {0}, old = {0};
    Py_ssize_t ncols = prog->ncols, row = 0;
    const mark_t *data = NULL;
    int r = buf_put(&value, "{\"data\":[", 9) < 0 ? FAIL : DONE;
    for (; r == DONE && rd->pos < end && (r = next_row(prog, rd, s, end, kind, 1)) == DONE; row++) {
        data = kind == KIND_UPDATE ? rd->marks + ncols : rd->marks;
        if ((row && buf_put(&value, ",", 1) < 0) || object(prog, &rd->texts, data, NULL, rd->names, &value) < 0 ||
            (kind == KIND_UPDATE && ((row && buf_put(&old, ",", 1) < 0) ||
                                     old_object(prog, canal, rd->names, &rd->texts, data, rd->marks, &old) < 0)))
            r = FAIL;
    }
    if (r == DONE && row == 0)
        r = DECLINE; /* a rows event of no rows: the Python path's to say what it is */
    if (r == DONE) { /* the last row's marks and texts are still the reader's */
        int failed = buf_put(&value, canal->middle.p, canal->middle.n) < 0 ||
                     (kind == KIND_UPDATE ? buf_put(&value, "[", 1) < 0 || buf_put(&value, old.data, old.len) < 0 ||
                                                buf_put(&value, "]", 1) < 0
                                          : buf_put(&value, "null", 4) < 0) ||
                     canal_end(prog, canal, rd->names, &rd->texts, data, &canal->first_sql, &value) < 0;
        r = failed ? FAIL : emit(ctx, NULL, 0, value.data, value.len);
    }
    *rows = row;
    PyMem_Free(value.data);
    PyMem_Free(old.data);
    return r;
}

int canal_rows(const program_t *prog, const canal_t *canal, const unsigned char *s, Py_ssize_t end, int kind,
               emit_fn emit, void *ctx, Py_ssize_t *rows) {
    Py_ssize_t ncols = prog->ncols, row = 0;
    *rows = 0;
    if (ncols < 1 || canal->names.n != ncols || (canal->per_event && prog->nkeys))
        return DECLINE; /* a message of an event's rows has no key */
    for (Py_ssize_t k = 0; k < prog->nkeys; k++)
        if (prog->cols[prog->keys[k].column].flags & COL_DROP)
            return DECLINE; /* a key of a column the messages leave out: connector/columns.py refuses it */
    reader_t rd;
    buf_t value = {0}, key = {0};
    int r = reader_open(&rd, ncols) < 0 ? FAIL : DONE;
    for (Py_ssize_t i = 0; r == DONE && i < ncols; i++)
        rd.names[i] = string_at(&canal->names, i);
    if (r == DONE && canal->per_event) {
        r = canal_event(prog, canal, &rd, s, end, kind, emit, ctx, rows);
        reader_close(&rd);
        return r;
    }
    for (; r == DONE && rd.pos < end && (r = next_row(prog, &rd, s, end, kind, 1)) == DONE; row++) {
        const mark_t *before = rd.marks, *data = kind == KIND_UPDATE ? rd.marks + ncols : rd.marks;
        for (Py_ssize_t k = 0; kind == KIND_UPDATE && k < prog->nkeys; k++)
            if (!same_text(&rd.texts, &before[prog->keys[k].column], &data[prog->keys[k].column]))
                r = DECLINE; /* the key moves: a message per image, as the Python path splits it */
        if (r != DONE)
            break;
        if (canal_value(prog, canal, rd.names, &rd.texts, data, kind == KIND_UPDATE ? before : NULL, row == 0,
                        &value) < 0 ||
            (prog->nkeys && canal_key(prog, rd.names, &rd.texts, data, &key) < 0)) {
            r = FAIL;
            break;
        }
        r = emit(ctx, prog->nkeys ? key.data : NULL, prog->nkeys ? key.len : 0, value.data, value.len);
    }
    *rows = row;
    reader_close(&rd);
    PyMem_Free(value.data);
    PyMem_Free(key.data);
    return r;
}
