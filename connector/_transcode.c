/* The compiled module: Python's entry points to connector/csrc/.
 *
 * transcode() writes one rows event's images as Avro messages (the encoder's path,
 * connector/avro/encoding.py), count_rows() walks them (the parser's, connector/binlog/rows.py),
 * route() places messages on partitions (the sink's), and Kernel runs a streaming session's
 * per-event loop (connector/lane.py). Each checks what Python hands it at this boundary; the work
 * is in connector/csrc/ (rowimage.c, hashes.c, kernel.c). tests/test_transcode.py holds the
 * functions to the Python path byte for byte; tests/test_lane.py and tests/fuzz/ the kernel.
 */
#include "csrc/native.h"

#include <limits.h>

/* -- transcoding ------------------------------------------------------------------------------ */

/* transcode_rows's emit for transcode(): each row as a (key or None, value) tuple, appended to the list ctx. */
static int emit_pair(void *ctx, const char *key, Py_ssize_t key_len, const char *value, Py_ssize_t value_len) {
    PyObject *k = key != NULL ? PyBytes_FromStringAndSize(key, key_len) : Py_NewRef(Py_None);
    PyObject *v = PyBytes_FromStringAndSize(value, value_len);
    PyObject *pair = k && v ? PyTuple_Pack(2, k, v) : NULL;
    Py_XDECREF(k);
    Py_XDECREF(v);
    int r = pair != NULL && PyList_Append(ctx, pair) == 0 ? DONE : FAIL;
    Py_XDECREF(pair);
    return r;
}

static bytes_t span(const Py_buffer *b) { return (bytes_t){(const unsigned char *)b->buf, b->len}; }

/* A program's buffers, and the rows kind, read into prog (rowimage.c, program_read): 0 if malformed;
 * `keys` NULL: a program without a key. */
static int program_of(const Py_buffer *columns, const Py_buffer *keys, const Py_buffer *strings, int kind,
                      program_t *prog) {
    return kind >= 0 && kind <= 2 &&
           program_read(columns->buf, columns->len, keys != NULL ? keys->buf : NULL, keys != NULL ? keys->len : 0,
                        strings->buf, strings->len, prog);
}

/* What an entry point returns of a run that wrote into `list` (whose reference it takes): the list
 * when it is DONE, None when it was DECLINEd, NULL with the Python error on FAIL. */
static PyObject *outcome(int r, PyObject *list) {
    PyObject *result = r == DONE ? Py_NewRef(list) : r == DECLINE ? Py_NewRef(Py_None) : NULL;
    Py_XDECREF(list);
    return result;
}

PyDoc_STRVAR(transcode_doc,
             "transcode(body, program, kind, keys, strings, key_prefix, first, rest, old_null, old_open, tail, base)\n"
             "--\n\n"
             "Every row of a rows event's images as (key or None, value) Avro bytes; None to decline.\n"
             "See connector/avro/transcode.py for the arguments.");

static PyObject *transcode(PyObject *self, PyObject *args) {
    Py_buffer body, program, keys, strings, key_prefix, first, rest, old_null, old_open, tail;
    int kind;
    long long base;
    if (!PyArg_ParseTuple(args, "y*y*iy*y*y*y*y*y*y*y*L", &body, &program, &kind, &keys, &strings, &key_prefix,
                          &first, &rest, &old_null, &old_open, &tail, &base))
        return NULL;
    PyObject *result = NULL;
    program_t prog = {.key_prefix = span(&key_prefix), .first = span(&first), .rest = span(&rest),
                      .old_null = span(&old_null), .old_open = span(&old_open), .tail = span(&tail)};
    if (!program_of(&program, &keys, &strings, kind, &prog)) {
        PyErr_SetString(PyExc_ValueError, "malformed transcode program (or a key column outside it)");
    } else if (base < 0 || base > LLONG_MAX - body.len) { /* a row's number, base + i, must not overflow */
        PyErr_SetString(PyExc_ValueError, "row number base out of range");
    } else {
        PyObject *list = PyList_New(0);
        int r = list == NULL ? FAIL : transcode_rows(&prog, body.buf, body.len, kind, base, emit_pair, list);
        result = outcome(r, list);
    }
    Py_buffer *all[] = {&body, &program, &keys, &strings, &key_prefix, &first, &rest, &old_null, &old_open, &tail};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        PyBuffer_Release(all[i]);
    return result;
}

PyDoc_STRVAR(render_json_doc,
             "render_json(body, program, kind, strings, names)\n--\n\n"
             "Every row of a rows event's images as canal's strings in JSON: a list of each row's `data`\n"
             "object, of (data, old) for UPDATE; None to decline. `names`: a tuple of each column's JSON\n"
             "key and colon as bytes. See connector/binlog/rowplan.py (json_program) and connector/flat.py.");

static PyObject *render_json(PyObject *self, PyObject *args) {
    Py_buffer body, program, strings;
    int kind;
    PyObject *names, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*iy*O!", &body, &program, &kind, &strings, &PyTuple_Type, &names))
        return NULL;
    program_t prog = {0};
    int ok = program_of(&program, NULL, &strings, kind, &prog) && PyTuple_GET_SIZE(names) == prog.ncols &&
             !program_shapes(prog.cols, prog.ncols);
    for (Py_ssize_t i = 0; ok && i < prog.ncols; i++)
        ok = PyBytes_Check(PyTuple_GET_ITEM(names, i));
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "malformed JSON program (or not a name, as bytes, per column)");
    } else {
        PyObject *list = PyList_New(0);
        result = outcome(list == NULL ? FAIL : json_rows(&prog, names, body.buf, body.len, kind, list), list);
    }
    PyBuffer_Release(&body);
    PyBuffer_Release(&program);
    PyBuffer_Release(&strings);
    return result;
}

PyDoc_STRVAR(canal_json_doc,
             "canal_json(body, program, kind, keys, strings, names, types, full_old, middle, first_sql, rest_sql, tail,\n"
             "           per_event=False)\n"
             "--\n\n"
             "Every row of a rows event's images as canal-json (key or None, value) bytes; None to decline.\n"
             "`keys`: the key's columns (key_t_ records); `names`: each column's JSON key and colon, as a\n"
             "program's strings; `types`: each column's sqltype_t; the rest: what the rows' messages share\n"
             "(connector/canal.py, CanalJsonEncoder.compiled). `per_event`: the event's rows in one message,\n"
             "with no key (message_rows = \"event\").");

static PyObject *canal_json(PyObject *self, PyObject *args) {
    Py_buffer body, program, keys, strings, names, types, middle, first_sql, rest_sql, tail;
    int kind, full_old, per_event = 0;
    if (!PyArg_ParseTuple(args, "y*y*iy*y*y*y*py*y*y*y*|p", &body, &program, &kind, &keys, &strings, &names, &types,
                          &full_old, &middle, &first_sql, &rest_sql, &tail, &per_event))
        return NULL;
    PyObject *result = NULL;
    program_t prog = {0};
    const sqltype_t *codes = types.buf;
    strings_t name_table;
    if (!program_of(&program, &keys, &strings, kind, &prog) || !strings_of(names.buf, names.len, &name_table) ||
        !canal_ok(prog.cols, prog.ncols, &name_table, codes, types.len)) {
        PyErr_SetString(PyExc_ValueError, "malformed canal-json program");
    } else {
        canal_t canal = {name_table,    codes,            full_old,         per_event,
                         span(&middle), span(&first_sql), span(&rest_sql), span(&tail)};
        PyObject *list = PyList_New(0);
        Py_ssize_t rows;
        int r = list == NULL ? FAIL : canal_rows(&prog, &canal, body.buf, body.len, kind, emit_pair, list, &rows);
        result = outcome(r, list);
    }
    Py_buffer *all[] = {&body, &program, &keys, &strings, &names, &types, &middle, &first_sql, &rest_sql, &tail};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        PyBuffer_Release(all[i]);
    return result;
}

/* -- walking ---------------------------------------------------------------------------------- */

PyDoc_STRVAR(count_rows_doc,
             "count_rows(body, layout, images)\n--\n\n"
             "The number of rows in a rows event's images, or -1 if they do not fit the layout\n"
             "(a walk_t per column, native_spec.RECORDS: a fixed width, or 0 and the length prefix's size;\n"
             "what is checked of the value, WALK_CHECKS; the code table WALK_CODES reads by).\n"
             "`images`: 1, or 2 for UPDATE.");

static PyObject *count_rows(PyObject *self, PyObject *args) {
    Py_buffer body, layout;
    int images;
    if (!PyArg_ParseTuple(args, "y*y*i", &body, &layout, &images))
        return NULL;
    Py_ssize_t rows = -1;
    if (layout.len % (Py_ssize_t)sizeof(walk_t) == 0)
        rows = walk_rows(layout.buf, layout.len / (Py_ssize_t)sizeof(walk_t), body.buf, body.len, images);
    PyBuffer_Release(&body);
    PyBuffer_Release(&layout);
    return PyLong_FromSsize_t(rows);
}

/* -- routing ----------------------------------------------------------------------------- */

/* Each message's key, value (borrowed from messages) and partition into items, or -1 after setting an
 * exception. */
static int route_partitions(PyObject *messages, Py_ssize_t partitions, Py_ssize_t fixed, Py_ssize_t skip,
                            out_t *items) {
    Py_ssize_t n = PyList_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(messages, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(item, 1))) {
            PyErr_Format(PyExc_TypeError, "message %zd is not a (key, value) pair of bytes", i);
            return -1;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 0);
        items[i] = (out_t){key, PyTuple_GET_ITEM(item, 1), (int32_t)fixed};
        if (fixed >= 0)
            continue;
        if (!PyBytes_Check(key)) {
            PyErr_Format(PyExc_ValueError, "message %zd has no key and no partition", i);
            return -1;
        }
        items[i].partition = key_partition((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), skip,
                                           (int32_t)partitions);
    }
    return 0;
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
    Py_ssize_t n = PyList_GET_SIZE(messages);
    out_t *items = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(out_t));
    PyObject *lists[2];
    if (items == NULL)
        PyErr_NoMemory();
    else if (route_partitions(messages, partitions, fixed, skip, items) == 0 &&
             route_lists(items, n, (int32_t)partitions, lists) == 0)
        result = Py_BuildValue("(NN)", lists[0], lists[1]);
    PyMem_Free(items);
    return result;
}

PyDoc_STRVAR(crc32_doc, "crc32(data, generic=False)\n--\n\n"
                        "The CRC-32 the kernel checks each event's checksum with: zlib.crc32(data)'s.\n"
                        "generic: without the CPU's carry-less multiply (the tests check both ways).");

static PyObject *crc32_py(PyObject *self, PyObject *args) {
    Py_buffer data;
    int generic = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &data, &generic))
        return NULL;
    uint32_t c = crc32_with(data.buf, data.len, generic);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

PyDoc_STRVAR(sha256_doc, "sha256(salt, text, generic=False)\n--\n\n"
                         "The hex SHA-256 of salt then text that a hashed column gets (COL_HASH).\n"
                         "generic: without the CPU's SHA extensions (the tests check both ways).");

static PyObject *sha256_py(PyObject *self, PyObject *args) {
    Py_buffer salt, text;
    int generic = 0;
    if (!PyArg_ParseTuple(args, "y*y*|p", &salt, &text, &generic))
        return NULL;
    char hex[64];
    sha256_hex(salt.buf, salt.len, text.buf, text.len, hex, generic);
    PyBuffer_Release(&salt);
    PyBuffer_Release(&text);
    return PyUnicode_FromStringAndSize(hex, sizeof hex);
}

PyDoc_STRVAR(learn_code_table_doc,
             "learn_code_table(number, nodes, texts, range=b'')\n--\n\n"
             "Learn a multi-byte charset's code table, which OP_TEXTMB columns name by number (see\n"
             "connector/native_spec.py, CODE_TABLES): once; learning it again with the same bytes does\n"
             "nothing. ValueError if the bytes are not a code table, or not the one learnt before.");

static PyObject *learn_code_table_py(PyObject *self, PyObject *args) {
    Py_buffer nodes, texts, range = {0};
    int number;
    if (!PyArg_ParseTuple(args, "iy*y*|y*", &number, &nodes, &texts, &range))
        return NULL;
    int r = learn_code_table(number, nodes.buf, nodes.len, texts.buf, texts.len, range.buf, range.len);
    PyBuffer_Release(&nodes);
    PyBuffer_Release(&texts);
    if (range.obj != NULL)
        PyBuffer_Release(&range);
    if (r == 0)
        PyErr_Format(PyExc_ValueError, "code table %d: not a code table, or not the one learnt before", number);
    return r == 1 ? Py_NewRef(Py_None) : NULL;
}

static PyMethodDef methods[] = {
    {"learn_code_table", learn_code_table_py, METH_VARARGS, learn_code_table_doc},
    {"transcode", transcode, METH_VARARGS, transcode_doc},
    {"count_rows", count_rows, METH_VARARGS, count_rows_doc},
    {"render_json", render_json, METH_VARARGS, render_json_doc},
    {"canal_json", canal_json, METH_VARARGS, canal_json_doc},
    {"route", route, METH_VARARGS, route_doc},
    {"crc32", crc32_py, METH_VARARGS, crc32_doc},
    {"sha256", sha256_py, METH_VARARGS, sha256_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "connector._transcode",
    .m_doc = "The compiled kernel and row-image transcoding (connector/native.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__transcode(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && kernel_types(m) < 0)
        Py_CLEAR(m);
    return m;
}
