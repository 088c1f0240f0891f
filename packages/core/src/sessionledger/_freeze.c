/*
 * sessionledger._freeze: the compiled form of snapshot's fast path, and of the read path's.
 *
 * freeze_mapping / freeze_sequence accept exactly what snapshot.py's pure-Python fast path
 * accepts (exact dict / FrozenDict / list / tuple containers, exact str keys, strings
 * UTF-8 can hold, ints within +-(2**53 - 1), finite floats other than -0.0, bools, None,
 * at most `depth` levels) and build the same frozen value: FrozenDict for a mapping,
 * tuple for a sequence, keys in the source's order, scalars shared. For anything else
 * they return None and the Python walk decides, and says what is wrong. The rules are in
 * docs/events.md, "JSON values"; the tests compare both implementations on generated
 * values.
 *
 * One thing only the compiled form does: a FrozenDict or tuple that holds no object the
 * cyclic garbage collector tracks is untracked too (it cannot be part of a cycle), as
 * CPython already does for a plain dict or tuple of scalars. A frozen value is built
 * from its leaves up, so a whole frozen JSON value ends untracked, and a large log
 * hands the collector far fewer objects to visit (docs/reading.md, "memory"). Should a
 * container ever be stored into such a dict (dict.__setitem__ bypasses FrozenDict's
 * guard), CPython tracks the dict again, so a cycle made that way is still seen.
 *
 * untrack(*objects) does the same for objects the caller vouches can never be part of
 * a reference cycle: the log's events and packed runs, which refer only to scalars,
 * frozen values, arrays and lists of scalars.
 *
 * On the read path, pack_run checks and packs a parsed chunk row's lists, and parse_row
 * decodes a stored row from its JSON text, when the text is in the writer's exact form,
 * into the parts of a packed run; any other text is left to orjson and the row checks
 * of chunks.py (see the comments at each). parse_envelope parses an event envelope in
 * the writer's form straight into its frozen values, event_from_json builds the event of
 * a parsed envelope, and decode_records / decode_lines run a cold load's decode loop
 * over a store's records (a list of RawRecord, or lines.LineRecords' lines) with no
 * Python frame per record, building runs and events through their slots. extend_slots,
 * loose_needing and loose_outside are eventlog.EventLog's loops over its slots, and
 * line_starts the scan for LineRecords. Each takes only what its Python form takes,
 * the same way, and leaves the rest to it.
 *
 * Python code can run inside almost any call made here: a dict lookup runs the __hash__
 * and __eq__ of a key that is not an exact str, and on CPython 3.11 any allocation of an
 * object the cyclic collector tracks may start a collection, whose finalisers (__del__,
 * weakref and gc callbacks) may change or empty the containers a caller passed in. So
 * each value read out of a caller's container is held by a strong reference from the
 * moment it is read until it is no longer used, and a container is read again, never
 * trusted, after such a call; only the arguments themselves, which the caller holds, are
 * borrowed. A value that changed under a helper makes it decline, and the Python form
 * decides (README, "the compiled accelerator"; `nox -s sanitize` runs the tests that
 * attack this under AddressSanitizer).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static PyTypeObject *frozen_type = NULL; /* FrozenDict, set by setup() */
static PyObject *no_args = NULL;         /* () for FrozenDict's tp_new */
static long long max_safe = 0;           /* MAX_SAFE_INTEGER */
static int max_depth = -1;               /* _FAST_DEPTH: nesting handled before a retry */

/* What a value is, for the fast path. */
enum kind { BAD = 0, SCALAR = 1, MAPPING = 2, SEQUENCE = 3 };

static int
string_fits(PyObject *text)
{
    /* UTF-8 holds every code point except the surrogates U+D800..U+DFFF, which only the
       2- and 4-byte forms can contain. */
    if (PyUnicode_READY(text) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (PyUnicode_IS_ASCII(text)) {
        return 1;
    }
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_2BYTE_KIND: {
        const Py_UCS2 *units = PyUnicode_2BYTE_DATA(text);
        for (Py_ssize_t i = 0; i < length; i++) {
            if (units[i] >= 0xD800 && units[i] <= 0xDFFF) {
                return 0;
            }
        }
        return 1;
    }
    case PyUnicode_4BYTE_KIND: {
        const Py_UCS4 *points = PyUnicode_4BYTE_DATA(text);
        for (Py_ssize_t i = 0; i < length; i++) {
            if (points[i] >= 0xD800 && points[i] <= 0xDFFF) {
                return 0;
            }
        }
        return 1;
    }
    default:
        return 1; /* one byte per code point: Latin-1, no surrogates */
    }
}

static int
is_mapping(PyObject *value)
{
    return Py_TYPE(value) == &PyDict_Type || Py_TYPE(value) == frozen_type;
}

/* The value of *key* in the dict *mapping* as a new reference; NULL when absent (no
   exception set) or on an error. The lookup may run Python code (the __hash__ or __eq__
   of a key that is not an exact str) that changes the dict or drops the key: the key is
   held while it is looked up, the value from the moment it is found. */
static PyObject *
lookup(PyObject *mapping, PyObject *key)
{
    Py_INCREF(key);
    PyObject *value = PyDict_GetItemWithError(mapping, key);
    Py_XINCREF(value);
    Py_DECREF(key);
    return value;
}

static enum kind
kind_of(PyObject *item)
{
    PyTypeObject *type = Py_TYPE(item);
    if (type == &PyUnicode_Type) {
        return string_fits(item) ? SCALAR : BAD;
    }
    if (type == &PyLong_Type) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || (value == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return BAD;
        }
        return (value >= -max_safe && value <= max_safe) ? SCALAR : BAD;
    }
    if (item == Py_None || type == &PyBool_Type) {
        return SCALAR;
    }
    if (type == &PyDict_Type || type == frozen_type) {
        return MAPPING;
    }
    if (type == &PyList_Type || type == &PyTuple_Type) {
        return SEQUENCE;
    }
    if (type == &PyFloat_Type) {
        double value = PyFloat_AS_DOUBLE(item);
        if (!isfinite(value) || (value == 0.0 && signbit(value))) {
            return BAD;
        }
        return SCALAR;
    }
    return BAD;
}

/* Each returns a new reference; NULL with no exception set means "not for the fast path"
   (the caller returns None), NULL with one set is a real error (out of memory). */
static PyObject *freeze_map(PyObject *source, int depth);
static PyObject *freeze_seq(PyObject *source, int depth);

static PyObject *
freeze_child(PyObject *item, enum kind kind, int depth)
{
    return kind == MAPPING ? freeze_map(item, depth + 1) : freeze_seq(item, depth + 1);
}

static PyObject *
freeze_map(PyObject *source, int depth)
{
    if (depth > max_depth) {
        return NULL;
    }
    PyObject *out = frozen_type->tp_new(frozen_type, no_args, NULL);
    if (out == NULL) {
        return NULL;
    }
    int flat = 1; /* no tracked object among the values */
    Py_ssize_t size = PyDict_GET_SIZE(source);
    Py_ssize_t position = 0;
    PyObject *key, *item;
    while (PyDict_Next(source, &position, &key, &item)) {
        if (PyDict_GET_SIZE(source) != size) {
            Py_DECREF(out); /* changed under us: the careful walk takes it */
            return NULL;
        }
        /* Hold both: an allocation below may run a collection, and a finaliser could
           change the source meanwhile. */
        Py_INCREF(key);
        Py_INCREF(item);
        PyObject *value = NULL;
        if (Py_TYPE(key) == &PyUnicode_Type && string_fits(key)) {
            enum kind kind = kind_of(item);
            if (kind == SCALAR) {
                value = item;
                Py_INCREF(value);
            }
            else if (kind != BAD) {
                value = freeze_child(item, kind, depth);
                flat = flat && value != NULL && !PyObject_GC_IsTracked(value);
            }
        }
        int failed = value == NULL || PyDict_SetItem(out, key, value) < 0;
        Py_XDECREF(value);
        Py_DECREF(key);
        Py_DECREF(item);
        if (failed) {
            Py_DECREF(out);
            return NULL;
        }
    }
    if (flat) {
        PyObject_GC_UnTrack(out);
    }
    return out;
}

static PyObject *
freeze_seq(PyObject *source, int depth)
{
    if (depth > max_depth) {
        return NULL;
    }
    int is_list = PyList_CheckExact(source);
    Py_ssize_t size = is_list ? PyList_GET_SIZE(source) : PyTuple_GET_SIZE(source);
    PyObject *out = PyTuple_New(size);
    if (out == NULL || size == 0) {
        return out;
    }
    int flat = 1;
    for (Py_ssize_t i = 0; i < size; i++) {
        if (is_list && PyList_GET_SIZE(source) != size) {
            Py_DECREF(out); /* changed under us: the careful walk takes it */
            return NULL;
        }
        PyObject *item = is_list ? PyList_GET_ITEM(source, i) : PyTuple_GET_ITEM(source, i);
        Py_INCREF(item);
        enum kind kind = kind_of(item);
        PyObject *value = NULL;
        if (kind == SCALAR) {
            value = item;
            Py_INCREF(value);
        }
        else if (kind != BAD) {
            value = freeze_child(item, kind, depth);
            flat = flat && value != NULL && !PyObject_GC_IsTracked(value);
        }
        Py_DECREF(item);
        if (value == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, value);
    }
    if (flat) {
        PyObject_GC_UnTrack(out);
    }
    return out;
}

static PyObject *
none_unless_error(void)
{
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A setup called again. What the helpers are set up with is read while they run, so it
   is set once: the same objects again are a no-op, other ones are refused (a setup run
   by a finaliser cannot swap what a running helper holds). */
static PyObject *
set_again(int same, const char *name)
{
    if (!same) {
        PyErr_Format(PyExc_RuntimeError,
                     "sessionledger._freeze.%s: already set up with other objects", name);
        return NULL;
    }
    Py_RETURN_NONE;
}

static int
ready(void)
{
    if (frozen_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup() was not called");
        return 0;
    }
    return 1;
}

static PyObject *
freeze_mapping(PyObject *module, PyObject *source)
{
    if (!ready()) {
        return NULL;
    }
    if (Py_TYPE(source) != &PyDict_Type && Py_TYPE(source) != frozen_type) {
        Py_RETURN_NONE;
    }
    PyObject *out = freeze_map(source, 0);
    return out != NULL ? out : none_unless_error();
}

static PyObject *
freeze_sequence(PyObject *module, PyObject *source)
{
    if (!ready()) {
        return NULL;
    }
    if (!PyList_CheckExact(source) && !PyTuple_CheckExact(source)) {
        Py_RETURN_NONE;
    }
    PyObject *out = freeze_seq(source, 0);
    return out != NULL ? out : none_unless_error();
}

/* One empty-of-meaning array per item code ("I", "q"), made when the module is imported
   (so that no import runs inside a helper): an array of *size* items is the template
   repeated, then filled through its buffer. Two calls into the array module per array,
   neither parsing arguments nor running Python code. */
static PyObject *array_templates[2] = {NULL, NULL};

static int
make_array_templates(void)
{
    PyObject *module = PyImport_ImportModule("array");
    if (module == NULL) {
        return -1;
    }
    static const char *const kinds[2] = {"I", "q"};
    for (int which = 0; which < 2; which++) {
        array_templates[which] = PyObject_CallMethod(module, "array", "s[i]", kinds[which], 0);
        if (array_templates[which] == NULL) {
            Py_DECREF(module);
            return -1;
        }
    }
    Py_DECREF(module);
    return 0;
}

static PyObject *
make_array(const char *kind, const void *items, Py_ssize_t size)
{
    int which = kind[0] == 'q';
    Py_buffer one;
    if (PyObject_GetBuffer(array_templates[which], &one, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t width = one.len;
    PyBuffer_Release(&one);
    if (width <= 0 || size % width != 0) {
        PyErr_SetString(PyExc_SystemError, "make_array: size is not a whole number of items");
        return NULL;
    }
    PyObject *out = PySequence_Repeat(array_templates[which], size / width);
    if (out == NULL) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (view.len != size) {
        PyBuffer_Release(&view);
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "make_array: the array is not of the size asked");
        return NULL;
    }
    memcpy(view.buf, items, (size_t)size);
    PyBuffer_Release(&view);
    if (PyObject_GC_IsTracked(out)) {
        PyObject_GC_UnTrack(out); /* an array holds no object */
    }
    return out;
}

/* pack_run(texts, gaps, time0): the checks and the packing of a stored chunk row, as
   chunks.py's pure form does them (_only_strings, _gaps_fit, then ChunkRun.seal's join and
   end offsets). None when a text is not exactly a str, a gap not exactly an int within
   +-max_safe, or a member time leaves +-max_safe. */
static PyObject *
pack_run(PyObject *module, PyObject *args)
{
    PyObject *texts, *gaps, *start;
    if (!ready() || !PyArg_ParseTuple(args, "OOO", &texts, &gaps, &start)) {
        return NULL;
    }
    if (!PyLong_CheckExact(start)) {
        Py_RETURN_NONE; /* the caller checked time0: not for this path */
    }
    int start_overflow = 0;
    long long time0 = PyLong_AsLongLongAndOverflow(start, &start_overflow);
    if (start_overflow) {
        Py_RETURN_NONE;
    }
    if ((!PyList_CheckExact(texts) && !PyTuple_CheckExact(texts))
        || (!PyList_CheckExact(gaps) && !PyTuple_CheckExact(gaps))) {
        Py_RETURN_NONE;
    }
    Py_ssize_t size = PySequence_Fast_GET_SIZE(texts);
    Py_ssize_t steps = PySequence_Fast_GET_SIZE(gaps);
    PyObject **items = PySequence_Fast_ITEMS(texts);
    PyObject **deltas = PySequence_Fast_ITEMS(gaps);
    /* The gaps first: no allocation, so nothing can change the lists under us. */
    long long time = time0;
    if (time < -max_safe || time > max_safe) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < steps; i++) {
        PyObject *gap = deltas[i];
        if (!PyLong_CheckExact(gap)) {
            Py_RETURN_NONE;
        }
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(gap, &overflow);
        if (overflow || value < -max_safe || value > max_safe) {
            Py_RETURN_NONE;
        }
        time += value; /* |time| and |value| <= 2**53: no overflow */
        if (time < -max_safe || time > max_safe) {
            Py_RETURN_NONE;
        }
    }
    unsigned long long total = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        if (!PyUnicode_CheckExact(items[i]) || PyUnicode_READY(items[i]) < 0) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        total += (unsigned long long)PyUnicode_GET_LENGTH(items[i]);
    }
    int narrow = total < 4294967296ULL;
    size_t width = narrow ? 4 : 8;
    void *ends = PyMem_Malloc(size ? (size_t)size * width : 1);
    if (ends == NULL) {
        return PyErr_NoMemory();
    }
    unsigned long long end = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        end += (unsigned long long)PyUnicode_GET_LENGTH(items[i]);
        if (narrow) {
            ((uint32_t *)ends)[i] = (uint32_t)end;
        }
        else {
            ((int64_t *)ends)[i] = (int64_t)end;
        }
    }
    /* The texts are joined before the array is made: its allocation may start a
       collection whose finalisers change the list (strings are not tracked, so neither
       the join nor the loops above allocate anything that could). */
    PyObject *empty = PyUnicode_New(0, 0);
    PyObject *joined = empty == NULL ? NULL : PyUnicode_Join(empty, texts);
    Py_XDECREF(empty);
    if (joined == NULL) {
        PyMem_Free(ends);
        return NULL;
    }
    if ((unsigned long long)PyUnicode_GET_LENGTH(joined) != end) {
        PyMem_Free(ends); /* cannot happen: nothing ran between */
        Py_DECREF(joined);
        Py_RETURN_NONE;
    }
    PyObject *offsets = make_array(narrow ? "I" : "q", ends, size * (Py_ssize_t)width);
    PyMem_Free(ends);
    if (offsets == NULL) {
        Py_DECREF(joined);
        return NULL;
    }
    return Py_BuildValue("(NN)", joined, offsets);
}

/* parse_row(text): a stored chunk row decoded straight from its JSON text, in the exact
   form the writer gives it (chunks.py's _row_data: no whitespace, keys in the writer's
   order, integers without fraction or exponent, strings with no surrogate escape, at
   least two members). Anything else, valid JSON or not, returns None and the ordinary
   path (orjson, then chunks.unpack_to_log) decides: the fast path only ever takes text
   whose parsed form that path turns into the very same run, with the same checks
   (docs/reading.md, "memory"). On success: (tag, seq0, turn, step, index, call id or
   None, name or None, joined texts, end offsets, member times). */

static const char *const row_tags[3] = {"text-chunks", "reasoning-chunks", "tool-call-chunks"};
static PyObject *row_tag_objects[3] = {NULL, NULL, NULL};

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} cursor;

static int
literal_of(cursor *at, const char *text, size_t size)
{
    if ((size_t)(at->end - at->p) < size || memcmp(at->p, text, size) != 0) {
        return 0;
    }
    at->p += size;
    return 1;
}

/* The exact bytes of a string constant (its length known when compiled). */
#define literal(at, text) literal_of((at), (text), sizeof(text) - 1)

static int
byte(cursor *at, unsigned char c)
{
    if (at->p < at->end && *at->p == c) {
        at->p++;
        return 1;
    }
    return 0;
}

/* A JSON integer within +-max_safe, as orjson would read it to an int: no leading zero,
   no "-0", nothing of a float after it. */
static int
safe_integer(cursor *at, long long *out)
{
    const unsigned char *p = at->p;
    int negative = 0;
    if (p < at->end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= at->end || *p < '0' || *p > '9' || (*p == '0' && negative)) {
        return 0;
    }
    unsigned long long value = 0;
    int digits = 0;
    if (*p == '0') {
        p++;
    }
    else {
        while (p < at->end && *p >= '0' && *p <= '9') {
            if (++digits > 16) {
                return 0; /* beyond 2**53 in any case */
            }
            value = value * 10 + (unsigned long long)(*p - '0');
            p++;
        }
    }
    if (p < at->end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E')) {
        return 0;
    }
    if (value > (unsigned long long)max_safe) {
        return 0;
    }
    at->p = p;
    *out = negative ? -(long long)value : (long long)value;
    return 1;
}

static int
hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* The bytes a JSON string holds as they are: 1 for ASCII, 2 for a byte of a multi-byte
   sequence; 0 for the quote, the backslash and the control characters below 0x20. */
static const unsigned char plain_byte[256] = {
#define ASCII16 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
#define HIGH16 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x22 is the quote */
    ASCII16, ASCII16,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x5C is the backslash */
    ASCII16, ASCII16,
    HIGH16, HIGH16, HIGH16, HIGH16, HIGH16, HIGH16, HIGH16, HIGH16,
#undef ASCII16
#undef HIGH16
};

/* A JSON string (at its opening quote), its UTF-8 appended at *out* (room for the
   string's own length is there: decoding never grows it); *chars* gets its code points
   (counted as the bytes that do not continue a sequence; the caller's strict UTF-8
   decode of the whole refuses any text that is not UTF-8). */
static int
json_string(cursor *at, unsigned char **out, Py_ssize_t *chars)
{
    const unsigned char *p = at->p;
    unsigned char *o = *out;
    Py_ssize_t count = 0;
    if (p >= at->end || *p != '"') {
        return 0;
    }
    p++;
    for (;;) {
        /* A run of bytes that stand for themselves, copied at once; its code points are
           its bytes unless one of them is not ASCII. */
        const unsigned char *run = p;
        int high = 0;
        unsigned char kind;
        while (p < at->end && (kind = plain_byte[*p]) != 0) {
            high |= kind;
            p++;
        }
        size_t length = (size_t)(p - run);
        memcpy(o, run, length);
        o += length;
        if (high & 2) {
            for (size_t i = 0; i < length; i++) {
                count += (run[i] & 0xC0) != 0x80;
            }
        }
        else {
            count += (Py_ssize_t)length;
        }
        if (p >= at->end) {
            return 0;
        }
        unsigned char c = *p;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20) {
            return 0; /* a raw control character: not JSON */
        }
        if (at->end - p < 2) {
            return 0;
        }
        unsigned char e = p[1];
        p += 2;
        unsigned char plain = 0;
        switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
            if (at->end - p < 4) {
                return 0;
            }
            int point = 0;
            for (int i = 0; i < 4; i++) {
                int digit = hex_digit(p[i]);
                if (digit < 0) {
                    return 0;
                }
                point = point * 16 + digit;
            }
            p += 4;
            if (point >= 0xD800 && point <= 0xDFFF) {
                return 0; /* surrogates, paired or not: the ordinary path decides */
            }
            if (point < 0x80) {
                *o++ = (unsigned char)point;
            }
            else if (point < 0x800) {
                *o++ = (unsigned char)(0xC0 | (point >> 6));
                *o++ = (unsigned char)(0x80 | (point & 0x3F));
            }
            else {
                *o++ = (unsigned char)(0xE0 | (point >> 12));
                *o++ = (unsigned char)(0x80 | ((point >> 6) & 0x3F));
                *o++ = (unsigned char)(0x80 | (point & 0x3F));
            }
            count++;
            continue;
        }
        default:
            return 0;
        }
        *o++ = plain;
        count++;
    }
    at->p = p;
    *out = o;
    *chars = count;
    return 1;
}

/* A short string field (a call's id or name) as a str, or NULL (no exception set) when
   it is not for the fast path. */
static PyObject *
string_field(cursor *at, unsigned char *scratch)
{
    unsigned char *o = scratch;
    Py_ssize_t chars;
    if (!json_string(at, &o, &chars)) {
        return NULL;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)scratch, o - scratch, "strict");
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
    }
    return text;
}

typedef struct {
    long long *times;  /* member times: time0, then each gap added */
    uint64_t *ends;    /* where each text ends in the joined texts, in code points */
    unsigned char *utf8; /* the joined texts */
    PyObject *call_id;
    PyObject *name;
    /* What the parse found, once it succeeded: */
    int tag;
    long long seq0, turn, step, index;
    Py_ssize_t members;
    PyObject *joined;  /* the texts joined, a str */
    PyObject *offsets; /* array of where each text ends in joined */
    PyObject *stamps;  /* array("q") of the member times */
} row_parts;

static void
row_parts_free(row_parts *parts)
{
    PyMem_Free(parts->times);
    PyMem_Free(parts->ends);
    PyMem_Free(parts->utf8);
    Py_XDECREF(parts->call_id);
    Py_XDECREF(parts->name);
    Py_XDECREF(parts->joined);
    Py_XDECREF(parts->offsets);
    Py_XDECREF(parts->stamps);
}

/* The body of parse_row: 1 with *parts* filled, 0 for "not for the fast path", -1 with an
   exception set. */
static int
parse_row_text(const unsigned char *text, Py_ssize_t size, row_parts *parts)
{
    cursor at = {text, text + size};
    if (!literal(&at, "{\"type\":\"")) {
        return 0;
    }
    int tag = -1;
    for (int i = 0; i < 3; i++) {
        cursor probe = at;
        if (literal_of(&probe, row_tags[i], strlen(row_tags[i]))
            && literal(&probe, "\",\"seq0\":")) {
            tag = i;
            at = probe;
            break;
        }
    }
    long long seq0, time0, turn, step, index;
    if (tag < 0 || !safe_integer(&at, &seq0) || seq0 < 0 || !literal(&at, ",\"time0\":")
        || !safe_integer(&at, &time0) || !literal(&at, ",\"data\":{\"turn\":")
        || !safe_integer(&at, &turn) || !literal(&at, ",\"step\":")
        || !safe_integer(&at, &step) || !literal(&at, ",\"index\":")
        || !safe_integer(&at, &index) || !literal(&at, ",\"dt\":[")) {
        return 0;
    }
    /* The gaps, added up into member times as they are read. Each gap takes two bytes
       at least ("1,"), so the line's length bounds their number. */
    Py_ssize_t limit = size / 2 + 2;
    parts->times = PyMem_Malloc((size_t)limit * sizeof(long long));
    parts->ends = PyMem_Malloc((size_t)limit * sizeof(uint64_t));
    parts->utf8 = PyMem_Malloc((size_t)size + 1);
    if (parts->times == NULL || parts->ends == NULL || parts->utf8 == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t members = 1;
    parts->times[0] = time0;
    if (!byte(&at, ']')) {
        for (;;) {
            long long gap;
            if (!safe_integer(&at, &gap) || members >= limit) {
                return 0;
            }
            long long time = parts->times[members - 1] + gap; /* both within 2**53 */
            if (time < -max_safe || time > max_safe) {
                return 0;
            }
            parts->times[members++] = time;
            if (byte(&at, ']')) {
                break;
            }
            if (!byte(&at, ',')) {
                return 0;
            }
        }
    }
    if (tag == 2) {
        if (!literal(&at, ",\"id\":")
            || (parts->call_id = string_field(&at, parts->utf8)) == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        if (literal(&at, ",\"name\":")
            && (parts->name = string_field(&at, parts->utf8)) == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        if (!literal(&at, ",\"args\":[")) {
            return 0;
        }
    }
    else if (!literal(&at, ",\"texts\":[")) {
        return 0;
    }
    unsigned char *out = parts->utf8;
    Py_ssize_t texts = 0;
    uint64_t chars_so_far = 0;
    for (;;) {
        Py_ssize_t chars;
        unsigned char *begin = out;
        if (texts >= members || !json_string(&at, &out, &chars)) {
            return 0; /* more texts than gaps allow, or a string not for this path */
        }
        if (out > begin && (*begin & 0xC0) == 0x80) {
            /* A text that starts inside a character: the joined texts may be UTF-8, but
               this text and the one before it are not, and orjson refuses the line. (When
               the joined texts are UTF-8, a text starting on a character's first byte
               ends where the one before it ends a character: each text is UTF-8.) */
            return 0;
        }
        chars_so_far += (uint64_t)chars;
        parts->ends[texts++] = chars_so_far;
        if (byte(&at, ']')) {
            break;
        }
        if (!byte(&at, ',')) {
            return 0;
        }
    }
    if (!literal(&at, "}}") || at.p != at.end || texts != members || members < 2
        || seq0 + members - 1 > max_safe) {
        return 0;
    }
    PyObject *joined = PyUnicode_DecodeUTF8((const char *)parts->utf8, out - parts->utf8, "strict");
    if (joined == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            return -1;
        }
        PyErr_Clear();
        return 0; /* not UTF-8: orjson refuses it, and the ordinary path says so */
    }
    parts->joined = joined;
    if ((uint64_t)PyUnicode_GET_LENGTH(joined) != chars_so_far) {
        return 0;
    }
    int narrow = chars_so_far < 4294967296ULL;
    if (narrow) {
        uint32_t *small = (uint32_t *)parts->ends; /* in place: each item only shrinks */
        for (Py_ssize_t i = 0; i < members; i++) {
            small[i] = (uint32_t)parts->ends[i];
        }
        parts->offsets = make_array("I", small, members * 4);
    }
    else {
        parts->offsets = make_array("q", parts->ends, members * 8);
    }
    if (parts->offsets == NULL
        || (parts->stamps = make_array("q", parts->times, members * 8)) == NULL) {
        return -1;
    }
    parts->tag = tag;
    parts->seq0 = seq0;
    parts->turn = turn;
    parts->step = step;
    parts->index = index;
    parts->members = members;
    return 1;
}

/* parse_row_text on the bytes of *source*: 0 for anything that holds no bytes too. */
static int
row_of(PyObject *source, row_parts *parts)
{
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return 0;
    }
    int found = parse_row_text((const unsigned char *)view.buf, view.len, parts);
    PyBuffer_Release(&view);
    return found;
}

/* The tuple parse_row returns for a parsed row. */
static PyObject *
row_tuple(row_parts *parts)
{
    PyObject *call_id = parts->call_id != NULL ? parts->call_id : Py_None;
    PyObject *name = parts->name != NULL ? parts->name : Py_None;
    return Py_BuildValue("(OLLLLOOOOO)", row_tag_objects[parts->tag], parts->seq0, parts->turn,
                         parts->step, parts->index, call_id, name, parts->joined, parts->offsets,
                         parts->stamps);
}

/* -- runs built here, as eventlog.ChunkRun.packed builds them ------------------------- */

/* ChunkRun's slots, set through their descriptors (setup_runs checks that these are all
   of them), in the order of run_slot_names. */
enum {
    RUN_KIND, RUN_TURN, RUN_STEP, RUN_INDEX, RUN_CALL_ID, RUN_NAME, RUN_WIDTH, RUN_SEQ0,
    RUN_END, RUN_TIMES, RUN_TIME0, RUN_GAPS, RUN_TEXTS, RUN_JOINED, RUN_ENDS, RUN_SLOTS
};
static const char *const run_slot_names[RUN_SLOTS] = {
    "kind", "turn", "step", "index", "call_id", "name", "_width", "seq0",
    "end", "_times", "_time0", "_gaps", "texts", "_joined", "_ends",
};
static PyTypeObject *run_type = NULL;     /* eventlog.ChunkRun, set by setup_runs() */
static PyObject *run_slots[RUN_SLOTS];    /* its member descriptors */
/* The member chunk type of each row tag (row_tags' order), as chunks.py's _ROW_KINDS. */
static const char *const member_kinds[3] = {"text-delta", "reasoning-delta", "tool-call-delta"};
static PyObject *member_kind_objects[3] = {NULL, NULL, NULL};


/* The member descriptors of *type* named *names* (new references into *out*), each checked
   to be a slot: 0, or -1 with an exception set and nothing kept. */
static int
slot_descriptors(PyObject *type, const char *const *names, int count, PyObject **out)
{
    for (int i = 0; i < count; i++) {
        out[i] = PyObject_GetAttrString(type, names[i]);
        if (out[i] == NULL || !PyObject_TypeCheck(out[i], &PyMemberDescr_Type)) {
            if (out[i] != NULL) {
                PyErr_Format(PyExc_ValueError, "%s is not a slot", names[i]);
            }
            for (int k = 0; k <= i; k++) {
                Py_CLEAR(out[k]);
            }
            return -1;
        }
    }
    return 0;
}

static int
runs_ready(void)
{
    if (run_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup_runs() was not called");
        return 0;
    }
    return 1;
}

/* Set the slot *which* of *run* to *value* (a new reference, taken; NULL passes an error on). */
static int
set_slot(PyObject *run, int which, PyObject *value)
{
    if (value == NULL) {
        return -1;
    }
    PyObject *descriptor = run_slots[which];
    int failed = Py_TYPE(descriptor)->tp_descr_set(descriptor, run, value);
    Py_DECREF(value);
    return failed;
}

/* The closed ChunkRun of a parsed row, equal slot by slot to ChunkRun.packed's. */
static PyObject *
row_run(row_parts *parts)
{
    PyObject *run = run_type->tp_alloc(run_type, 0);
    if (run == NULL) {
        return NULL;
    }
    int width = parts->call_id == NULL ? 3 : parts->name == NULL ? 4 : 5;
    if (set_slot(run, RUN_KIND, Py_NewRef(member_kind_objects[parts->tag])) < 0
        || set_slot(run, RUN_TURN, PyLong_FromLongLong(parts->turn)) < 0
        || set_slot(run, RUN_STEP, PyLong_FromLongLong(parts->step)) < 0
        || set_slot(run, RUN_INDEX, PyLong_FromLongLong(parts->index)) < 0
        || set_slot(run, RUN_CALL_ID, Py_NewRef(parts->call_id ? parts->call_id : Py_None)) < 0
        || set_slot(run, RUN_NAME, Py_NewRef(parts->name ? parts->name : Py_None)) < 0
        || set_slot(run, RUN_WIDTH, PyLong_FromLong(width)) < 0
        || set_slot(run, RUN_SEQ0, PyLong_FromLongLong(parts->seq0)) < 0
        || set_slot(run, RUN_END, PyLong_FromLongLong(parts->seq0 + parts->members)) < 0
        || set_slot(run, RUN_TIMES, Py_NewRef(parts->stamps)) < 0
        || set_slot(run, RUN_TIME0, PyLong_FromLong(0)) < 0
        || set_slot(run, RUN_GAPS, Py_NewRef(Py_None)) < 0
        || set_slot(run, RUN_TEXTS, Py_NewRef(Py_None)) < 0
        || set_slot(run, RUN_JOINED, Py_NewRef(parts->joined)) < 0
        || set_slot(run, RUN_ENDS, Py_NewRef(parts->offsets)) < 0) {
        Py_DECREF(run);
        return NULL;
    }
    /* As ChunkRun's __init__ does: a run refers to scalars and arrays only. */
    if (PyObject_GC_IsTracked(run)) {
        PyObject_GC_UnTrack(run);
    }
    return run;
}

static PyObject *
parse_row(PyObject *module, PyObject *source)
{
    if (!ready()) {
        return NULL;
    }
    row_parts parts = {0};
    int found = row_of(source, &parts);
    PyObject *result = found < 0 ? NULL : found == 0 ? Py_NewRef(Py_None) : row_tuple(&parts);
    row_parts_free(&parts);
    return result;
}

/* event_from_json(envelope): the common case of events.py's SessionEvent.from_json in
   one call: an exact dict with only the envelope's keys, the four required ones present,
   a non-empty str type that is no storage tag, a safe non-negative int seq, a safe int
   time, a dict data the fast freeze accepts, surfaceOp absent or "append", sourceEventSeqs
   absent or a list or tuple of safe non-negative ints, ignorable absent or true. The
   event is built as from_json builds it (make_event). Anything else returns None and
   from_json decides, and says what is wrong; the tests compare both on generated
   envelopes. */

/* SessionEvent's slots (its fields), set and read through their descriptors: an event is
   built here as make_event builds it, with no Python frame. */
enum {
    EVENT_TYPE, EVENT_SEQ, EVENT_TIME, EVENT_DATA, EVENT_SURFACE, EVENT_SOURCES,
    EVENT_IGNORABLE, EVENT_SLOTS
};
static const char *const event_slot_names[EVENT_SLOTS] = {
    "type", "seq", "time", "data", "surface_op", "source_event_seqs", "ignorable",
};
static PyTypeObject *event_type = NULL;   /* events.SessionEvent, set by setup_events() */
static PyObject *event_slots[EVENT_SLOTS];
static PyObject *reserved_types = NULL; /* RESERVED_TYPES: types a stored event cannot have */
static PyObject *append_op = NULL;      /* events.APPEND */
static PyObject *envelope_keys[7] = {NULL};
static PyObject *shallow_name = NULL;   /* "_shallow": FrozenDict's proved-shallow mark */

enum { KEY_TYPE, KEY_SEQ, KEY_TIME, KEY_DATA, KEY_SURFACE, KEY_SOURCES, KEY_IGNORABLE };

static int
int_within(PyObject *value, long long low, long long high)
{
    if (!PyLong_CheckExact(value)) {
        return 0;
    }
    int overflow = 0;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (number == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return number >= low && number <= high;
}

static int
events_ready(void)
{
    if (!ready()) {
        return 0;
    }
    if (event_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup_events() was not called");
        return 0;
    }
    return 1;
}

/* The event of *fields* (borrowed, in event_slot_names' order): what make_event builds,
   an instance of SessionEvent with its slots set, made without a Python call. */
static PyObject *
build_event(PyObject *const *fields)
{
    PyObject *event = event_type->tp_alloc(event_type, 0);
    if (event == NULL) {
        return NULL;
    }
    for (int i = 0; i < EVENT_SLOTS; i++) {
        PyObject *descriptor = event_slots[i];
        if (Py_TYPE(descriptor)->tp_descr_set(descriptor, event, fields[i]) < 0) {
            Py_DECREF(event);
            return NULL;
        }
    }
    return event;
}

/* An event's field *which* (a new reference), read through its slot. */
static PyObject *
event_field(PyObject *event, int which)
{
    PyObject *descriptor = event_slots[which];
    return Py_TYPE(descriptor)->tp_descr_get(descriptor, event, NULL);
}

/* sourceEventSeqs (a list or tuple the caller holds) as an event keeps it: a tuple of
   safe non-negative ints; None when an item is anything else, NULL on an error. The tuple
   is allocated before a list's items are read (the allocation may start a collection
   whose finalisers change the list), and a list that changed meanwhile is declined. */
static PyObject *
seqs_of(PyObject *sources)
{
    if (PyTuple_CheckExact(sources)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sources); i++) {
            if (!int_within(PyTuple_GET_ITEM(sources, i), 0, max_safe)) {
                Py_RETURN_NONE;
            }
        }
        return Py_NewRef(sources);
    }
    if (!PyList_CheckExact(sources)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyList_GET_SIZE(sources);
    PyObject *seqs = PyTuple_New(count);
    if (seqs == NULL || PyList_GET_SIZE(sources) != count) {
        Py_XDECREF(seqs);
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(sources, i);
        if (!int_within(item, 0, max_safe)) {
            Py_DECREF(seqs);
            Py_RETURN_NONE;
        }
        PyTuple_SET_ITEM(seqs, i, Py_NewRef(item));
    }
    return seqs;
}

/* The event of an envelope's *fields* (each held, NULL when absent, the required four
   there), or None, or NULL with an error; its seq in *seq*. */
static PyObject *
event_of_fields(PyObject *const *fields, int parsed, long long *seq)
{
    PyObject *type = fields[KEY_TYPE], *data = fields[KEY_DATA];
    PyObject *surface = fields[KEY_SURFACE], *sources = fields[KEY_SOURCES];
    PyObject *ignorable = fields[KEY_IGNORABLE];
    if (!PyUnicode_CheckExact(type) || PyUnicode_GET_LENGTH(type) == 0
        || !int_within(fields[KEY_SEQ], 0, max_safe)
        || !int_within(fields[KEY_TIME], -max_safe, max_safe)
        || (ignorable != NULL && ignorable != Py_True)
        || (parsed ? Py_TYPE(data) != frozen_type : !is_mapping(data))) {
        Py_RETURN_NONE;
    }
    int reserved = PySet_Contains(reserved_types, type);
    if (reserved != 0) {
        return reserved < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *op = Py_None;
    if (surface != NULL) {
        if (!PyUnicode_CheckExact(surface) || PyUnicode_Compare(surface, append_op) != 0) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE; /* a replace, or no op at all: from_json parses or refuses it */
        }
        op = append_op;
    }
    PyObject *seqs = sources != NULL ? seqs_of(sources) : NULL;
    if (seqs == Py_None || (seqs == NULL && PyErr_Occurred())) {
        return seqs;
    }
    PyObject *frozen = parsed ? Py_NewRef(data) : freeze_map(data, 0);
    if (frozen == NULL) {
        Py_XDECREF(seqs);
        return none_unless_error();
    }
    PyObject *event = NULL;
    if (PyObject_SetAttr(frozen, shallow_name, Py_True) == 0) {
        PyObject *values[EVENT_SLOTS] = {
            type, fields[KEY_SEQ], fields[KEY_TIME], frozen, op,
            seqs != NULL ? seqs : Py_None, ignorable != NULL ? Py_True : Py_False,
        };
        event = build_event(values);
        *seq = PyLong_AsLongLong(fields[KEY_SEQ]); /* a safe int: no error */
    }
    Py_DECREF(frozen);
    Py_XDECREF(seqs);
    return event;
}

/* The body of event_from_json, once both setups ran; the event's seq in *seq*. With
   *parsed*, the envelope is parse_envelope's: its data is already the frozen value
   freeze_map would build. Each field is held while the event is made (see the top). */
static PyObject *
event_of(PyObject *envelope, int parsed, long long *seq)
{
    if (!PyDict_CheckExact(envelope)) {
        Py_RETURN_NONE;
    }
    PyObject *fields[7] = {NULL};
    Py_ssize_t found = 0;
    int failed = 0;
    for (int key = 0; key < 7 && !failed; key++) {
        fields[key] = lookup(envelope, envelope_keys[key]);
        found += fields[key] != NULL;
        failed = fields[key] == NULL && PyErr_Occurred();
    }
    PyObject *event = NULL;
    if (!failed) {
        /* Every key one of the envelope's (none unknown), the required four among them. */
        int whole = found == PyDict_GET_SIZE(envelope) && fields[KEY_TYPE] != NULL
                    && fields[KEY_SEQ] != NULL && fields[KEY_TIME] != NULL
                    && fields[KEY_DATA] != NULL;
        event = whole ? event_of_fields(fields, parsed, seq) : Py_NewRef(Py_None);
    }
    for (int key = 0; key < 7; key++) {
        Py_XDECREF(fields[key]);
    }
    return event;
}

static PyObject *
event_from_json(PyObject *module, PyObject *envelope)
{
    long long seq;
    return events_ready() ? event_of(envelope, 0, &seq) : NULL;
}

/* make_event(type, seq, time, data, surface_op, source_event_seqs, ignorable): the event of
   these fields, unvalidated, as events.make_event builds it (build_event). */
static PyObject *
make_event_compiled(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != EVENT_SLOTS) {
        PyErr_SetString(PyExc_TypeError, "make_event takes the event's seven fields");
        return NULL;
    }
    return events_ready() ? build_event(args) : NULL;
}

/* -- a streamed delta validated and frozen in one step (deltas.freeze_delta) ----------- */

enum { DK_TURN, DK_STEP, DK_CHUNK, DK_TYPE, DK_INDEX, DK_TEXT, DK_ID, DK_NAME, DK_ARGS, DK_KEYS };
static const char *const delta_key_names[DK_KEYS] = {
    "turn", "step", "chunk", "type", "index", "text", "id", "name", "argumentsDelta",
};
static PyObject *delta_keys[DK_KEYS];
static PyObject *delta_kinds = NULL; /* deltas._KINDS: each kind, to its canonical str */
static PyObject *tool_kind = NULL;   /* deltas._TOOL_KIND */

/* The value of *key* in *mapping* (a new reference): NULL with *missing* set when absent
   (or, as Python's lookup raises them, a TypeError or a KeyError: freeze_delta catches
   both), NULL with an error otherwise. */
static PyObject *
item(PyObject *mapping, PyObject *key, int *missing)
{
    PyObject *value = lookup(mapping, key);
    if (value == NULL) {
        if (!PyErr_Occurred()) {
            *missing = 1;
        }
        else if (PyErr_ExceptionMatches(PyExc_TypeError)
                 || PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear(); /* freeze_delta catches it: not a delta */
            *missing = 1;
        }
    }
    return value;
}

/* What a delta's data holds, each a new reference (NULL: not read), read in the order
   pure_freeze_delta reads it: its lookups may run Python code, so the count of a chunk's
   keys is read where that form reads it. */
typedef struct {
    PyObject *chunk, *turn, *step, *stated, *kind, *index, *call_id, *name, *text;
} delta_parts;

static void
delta_parts_clear(delta_parts *parts)
{
    Py_CLEAR(parts->chunk);
    Py_CLEAR(parts->turn);
    Py_CLEAR(parts->step);
    Py_CLEAR(parts->stated);
    Py_CLEAR(parts->kind);
    Py_CLEAR(parts->index);
    Py_CLEAR(parts->call_id);
    Py_CLEAR(parts->name);
    Py_CLEAR(parts->text);
}

/* A tool call's id, name and arguments text into *parts*: 1, 0 when not well formed, -1
   with an error (deltas._tool_fields). */
static int
tool_read(PyObject *chunk, delta_parts *parts)
{
    int missing = 0;
    Py_ssize_t size = PyDict_GET_SIZE(chunk);
    if (size < 4 || size > 5) {
        return 0;
    }
    if ((parts->call_id = item(chunk, delta_keys[DK_ID], &missing)) == NULL
        || (parts->text = item(chunk, delta_keys[DK_ARGS], &missing)) == NULL
        || (size == 5 && (parts->name = item(chunk, delta_keys[DK_NAME], &missing)) == NULL)) {
        return missing ? 0 : -1;
    }
    PyObject *call_id = parts->call_id, *name = parts->name;
    return PyUnicode_CheckExact(call_id) && PyUnicode_GET_LENGTH(call_id) > 0
           && string_fits(call_id)
           && (name == NULL || (PyUnicode_CheckExact(name) && string_fits(name)));
}

/* The parts of a well-formed delta into *parts*: 1, 0 for anything else, -1 with an
   error. */
static int
delta_read(PyObject *data, delta_parts *parts)
{
    int missing = 0;
    if ((parts->chunk = item(data, delta_keys[DK_CHUNK], &missing)) == NULL
        || (parts->turn = item(data, delta_keys[DK_TURN], &missing)) == NULL
        || (parts->step = item(data, delta_keys[DK_STEP], &missing)) == NULL) {
        return missing ? 0 : -1;
    }
    PyObject *chunk = parts->chunk;
    if (!is_mapping(chunk) || !int_within(parts->turn, 1, max_safe)
        || !int_within(parts->step, 1, max_safe)) {
        return 0;
    }
    if ((parts->stated = item(chunk, delta_keys[DK_TYPE], &missing)) == NULL
        || (parts->kind = item(delta_kinds, parts->stated, &missing)) == NULL
        || (parts->index = item(chunk, delta_keys[DK_INDEX], &missing)) == NULL) {
        return missing ? 0 : -1;
    }
    if (!int_within(parts->index, 0, max_safe)) {
        return 0;
    }
    int fits = parts->kind == tool_kind ? tool_read(chunk, parts) : 1;
    if (fits > 0 && parts->kind != tool_kind) {
        if ((parts->text = item(chunk, delta_keys[DK_TEXT], &missing)) == NULL) {
            return missing ? 0 : -1;
        }
        fits = PyDict_GET_SIZE(chunk) == 3;
    }
    return fits <= 0 ? fits : PyUnicode_CheckExact(parts->text) && string_fits(parts->text);
}

/* A FrozenDict of *count* keys and values (the caller holds them), untracked (it holds
   scalars and frozen values only). */
static PyObject *
frozen_of(PyObject *const *keys, PyObject *const *values, int count)
{
    PyObject *out = frozen_type->tp_new(frozen_type, no_args, NULL);
    for (int i = 0; out != NULL && i < count; i++) {
        if (PyDict_SetItem(out, keys[i], values[i]) < 0) {
            Py_CLEAR(out);
        }
    }
    if (out != NULL && PyObject_GC_IsTracked(out)) {
        PyObject_GC_UnTrack(out);
    }
    return out;
}

/* The frozen data and run fields of a well-formed delta's *parts*, or NULL. */
static PyObject *
delta_frozen(const delta_parts *parts)
{
    PyObject *kind = parts->kind, *index = parts->index, *text = parts->text;
    PyObject *call_id = parts->call_id, *name = parts->name;
    PyObject *frozen_chunk;
    if (call_id == NULL) {
        PyObject *keys[3] = {delta_keys[DK_TYPE], delta_keys[DK_INDEX], delta_keys[DK_TEXT]};
        PyObject *values[3] = {kind, index, text};
        frozen_chunk = frozen_of(keys, values, 3);
    }
    else if (name == NULL) {
        PyObject *keys[4] = {delta_keys[DK_TYPE], delta_keys[DK_INDEX], delta_keys[DK_ID],
                             delta_keys[DK_ARGS]};
        PyObject *values[4] = {kind, index, call_id, text};
        frozen_chunk = frozen_of(keys, values, 4);
    }
    else {
        PyObject *keys[5] = {delta_keys[DK_TYPE], delta_keys[DK_INDEX], delta_keys[DK_ID],
                             delta_keys[DK_NAME], delta_keys[DK_ARGS]};
        PyObject *values[5] = {kind, index, call_id, name, text};
        frozen_chunk = frozen_of(keys, values, 5);
    }
    if (frozen_chunk == NULL) {
        return NULL;
    }
    PyObject *keys[3] = {delta_keys[DK_TURN], delta_keys[DK_STEP], delta_keys[DK_CHUNK]};
    PyObject *values[3] = {parts->turn, parts->step, frozen_chunk};
    PyObject *frozen = frozen_of(keys, values, 3);
    Py_DECREF(frozen_chunk);
    if (frozen == NULL || PyObject_SetAttr(frozen, shallow_name, Py_True) < 0) {
        Py_XDECREF(frozen);
        return NULL;
    }
    return Py_BuildValue("(N(OOOOOOO))", frozen, kind, parts->turn, parts->step, index,
                         call_id != NULL ? call_id : Py_None, name != NULL ? name : Py_None,
                         text);
}

/* The body of freeze_delta: (frozen data, fields), None, or NULL with an error. Every
   value read from *data* is held until the result is made (see the top). */
static PyObject *
delta_of(PyObject *data)
{
    if (!is_mapping(data) || PyDict_GET_SIZE(data) != 3) {
        Py_RETURN_NONE;
    }
    delta_parts parts = {NULL};
    int found = delta_read(data, &parts);
    PyObject *out = found < 0 ? NULL : found == 0 ? Py_NewRef(Py_None) : delta_frozen(&parts);
    delta_parts_clear(&parts);
    return out;
}

static PyObject *
freeze_delta(PyObject *module, PyObject *data)
{
    if (!events_ready()) {
        return NULL;
    }
    if (delta_kinds == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup_deltas() was not called");
        return NULL;
    }
    return delta_of(data);
}

/* setup_deltas(kinds, tool_kind): deltas._KINDS and deltas._TOOL_KIND. */
static PyObject *
setup_deltas(PyObject *module, PyObject *args)
{
    PyObject *kinds, *tool;
    if (!PyArg_ParseTuple(args, "O!U", &PyDict_Type, &kinds, &tool)) {
        return NULL;
    }
    if (delta_kinds != NULL) {
        return set_again(delta_kinds == kinds && tool_kind == tool, "setup_deltas");
    }
    for (int i = 0; i < DK_KEYS; i++) {
        if (delta_keys[i] == NULL
            && (delta_keys[i] = PyUnicode_InternFromString(delta_key_names[i])) == NULL) {
            return NULL;
        }
    }
    Py_XSETREF(delta_kinds, Py_NewRef(kinds));
    Py_XSETREF(tool_kind, Py_NewRef(tool));
    Py_RETURN_NONE;
}

/* -- an envelope parsed straight into its frozen form ------------------------------- */

/* parse_envelope(text): an event envelope in the writer's exact form (jsoncodec.dumps:
   compact, no whitespace) parsed into the dict orjson.loads would give, except that its
   values are frozen as freeze_map freezes them: objects FrozenDicts, arrays tuples, all
   untracked. Only what that path takes is taken: strings
   that are UTF-8 with no surrogate escape, integers within +-max_safe written as orjson
   writes them, true, false, null, objects without a repeated key, nesting within
   max_depth below the envelope. A float, whitespace, anything deeper or anything not
   JSON makes it decline (NULL, no exception set), and the caller takes orjson and
   event_from_json, which decide the same: so the events a load makes do not depend on
   which parse ran (the tests compare both on generated envelopes and mutated texts).
   The envelope's own parse, orjson's tree and its copy by freeze_map were most of a
   cold load's decode. */

typedef struct {
    cursor at;
    unsigned char *scratch; /* room for any string of the text, decoded */
} parse_state;

/* Recently met object keys, shared: a log repeats a few dozen keys a million times, and
   an interned key is compared by identity in every later lookup. */
#define KEY_CACHE 512
static PyObject *key_cache[KEY_CACHE];

static PyObject *frozen_value(parse_state *state, int depth);

/* The str of a JSON string (at its opening quote), or NULL: declined (no exception set),
   or an error. *key* asks for the shared form of a short key. */
static PyObject *
string_value(parse_state *state, int key)
{
    cursor *at = &state->at;
    const unsigned char *start = at->p + 1; /* the caller saw the quote */
    const unsigned char *p = start;
    int high = 0;
    unsigned char kind;
    while (p < at->end && (kind = plain_byte[*p]) != 0) {
        high |= kind;
        p++;
    }
    if (p >= at->end) {
        return NULL;
    }
    Py_ssize_t size = p - start;
    if (*p == '"' && !(high & 2)) {
        /* ASCII, no escape: the common case, the bytes themselves */
        at->p = p + 1;
        if (key && size <= 32) {
            unsigned int hash = (unsigned int)size;
            for (Py_ssize_t i = 0; i < size; i++) {
                hash = hash * 31u + start[i];
            }
            PyObject **slot = &key_cache[hash % KEY_CACHE];
            if (*slot != NULL && PyUnicode_GET_LENGTH(*slot) == size
                && memcmp(PyUnicode_DATA(*slot), start, (size_t)size) == 0) {
                return Py_NewRef(*slot);
            }
            PyObject *text = PyUnicode_FromStringAndSize((const char *)start, size);
            if (text == NULL) {
                return NULL;
            }
            PyUnicode_InternInPlace(&text);
            Py_XSETREF(*slot, Py_NewRef(text));
            return text;
        }
        PyObject *text = PyUnicode_New(size, 127);
        if (text != NULL) {
            memcpy(PyUnicode_DATA(text), start, (size_t)size);
        }
        return text;
    }
    const unsigned char *from = start;
    Py_ssize_t length = size;
    if (*p != '"') {
        /* escapes (or a control character): decoded into the scratch room */
        cursor quoted = {at->p, at->end};
        unsigned char *out = state->scratch;
        Py_ssize_t chars;
        if (!json_string(&quoted, &out, &chars)) {
            return NULL;
        }
        at->p = quoted.p;
        from = state->scratch;
        length = out - state->scratch;
    }
    else {
        at->p = p + 1;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)from, length, "strict");
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear(); /* not UTF-8, or a surrogate: orjson refuses it, the rules say so */
    }
    return text;
}

/* An object's members, from just after its brace, into the dict *out*, each value frozen
   at *depth*: 1 once its closing brace is read; 0 when declined (a repeated key included:
   orjson's to take) or on an error. */
static int
object_members(parse_state *state, PyObject *out, int depth)
{
    cursor *at = &state->at;
    int closed = byte(at, '}');
    while (!closed && at->p < at->end && *at->p == '"') {
        PyObject *key = string_value(state, 1);
        PyObject *value = key != NULL && byte(at, ':') ? frozen_value(state, depth) : NULL;
        Py_ssize_t before = PyDict_GET_SIZE(out);
        int failed = value == NULL || PyDict_SetItem(out, key, value) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (failed || PyDict_GET_SIZE(out) == before) {
            break;
        }
        closed = byte(at, '}');
        if (!closed && !byte(at, ',')) {
            break;
        }
    }
    return closed;
}

/* An object as a FrozenDict, or an array as a tuple: each holds only scalars and frozen
   values, none of which the cyclic collector tracks, so each is untracked too (as
   freeze_map leaves such a value). */
static PyObject *
frozen_object(parse_state *state, int depth)
{
    state->at.p++; /* the brace */
    PyObject *out = frozen_type->tp_new(frozen_type, no_args, NULL);
    if (out == NULL) {
        return NULL;
    }
    if (!object_members(state, out, depth + 1)) {
        Py_DECREF(out);
        return NULL;
    }
    if (PyObject_GC_IsTracked(out)) {
        PyObject_GC_UnTrack(out);
    }
    return out;
}

/* Room for an array's items while it is read: most arrays are short. */
#define ITEMS_ON_STACK 64

static PyObject *
frozen_array(parse_state *state, int depth)
{
    cursor *at = &state->at;
    at->p++; /* the bracket */
    PyObject *stack[ITEMS_ON_STACK];
    PyObject **items = stack;
    Py_ssize_t count = 0, room = ITEMS_ON_STACK;
    int closed = byte(at, ']'), failed = 0;
    while (!closed && !failed) {
        PyObject *value = frozen_value(state, depth + 1);
        if (value == NULL) {
            failed = 1;
            break;
        }
        if (count == room) {
            PyObject **more = PyMem_Malloc((size_t)room * 2 * sizeof(PyObject *));
            if (more == NULL) {
                Py_DECREF(value);
                PyErr_NoMemory();
                failed = 1;
                break;
            }
            memcpy(more, items, (size_t)count * sizeof(PyObject *));
            if (items != stack) {
                PyMem_Free(items);
            }
            items = more;
            room *= 2;
        }
        items[count++] = value;
        closed = byte(at, ']');
        failed = !closed && !byte(at, ',');
    }
    PyObject *out = NULL;
    if (closed && !failed) {
        out = PyTuple_New(count); /* takes the items' references */
        for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
            PyTuple_SET_ITEM(out, i, items[i]);
        }
    }
    if (out == NULL) {
        for (Py_ssize_t i = 0; i < count; i++) {
            Py_DECREF(items[i]);
        }
    }
    else if (PyObject_GC_IsTracked(out)) {
        PyObject_GC_UnTrack(out);
    }
    if (items != stack) {
        PyMem_Free(items);
    }
    return out;
}

/* A value at *depth* (the envelope's values are at 0, as freeze_map counts from data). */
static PyObject *
frozen_value(parse_state *state, int depth)
{
    cursor *at = &state->at;
    if (at->p >= at->end) {
        return NULL;
    }
    switch (*at->p) {
    case '"':
        return string_value(state, 0);
    case '{':
        return depth > max_depth ? NULL : frozen_object(state, depth);
    case '[':
        return depth > max_depth ? NULL : frozen_array(state, depth);
    case 't':
        return literal(at, "true") ? Py_NewRef(Py_True) : NULL;
    case 'f':
        return literal(at, "false") ? Py_NewRef(Py_False) : NULL;
    case 'n':
        return literal(at, "null") ? Py_NewRef(Py_None) : NULL;
    default: {
        long long number;
        return safe_integer(at, &number) ? PyLong_FromLongLong(number) : NULL;
    }
    }
}

/* The envelope dict, or NULL: declined (no exception set), or an error. */
static PyObject *
parse_envelope_text(const unsigned char *text, Py_ssize_t size)
{
    if (size < 2 || text[0] != '{') {
        return NULL;
    }
    parse_state state = {{text, text + size}, PyMem_Malloc((size_t)size)};
    if (state.scratch == NULL) {
        return PyErr_NoMemory();
    }
    cursor *at = &state.at;
    at->p++;
    PyObject *out = PyDict_New();
    /* An envelope has a key at least, and nothing after its closing brace. */
    int done = out != NULL && at->p < at->end && *at->p == '"'
               && object_members(&state, out, 0) && at->p == at->end;
    PyMem_Free(state.scratch);
    if (!done) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *
parse_envelope(PyObject *module, PyObject *source)
{
    if (!ready()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *out = parse_envelope_text((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return out != NULL ? out : none_unless_error();
}

/* decode_records(records, start, stop, expected, taken, loads): the common case of
   committed.py's decode loop, with no Python frame per record. From records[start] up to
   records[stop] (a list of RawRecord), while a record is JSON text (its text is not None) that parse_row takes, or
   that loads parses to an envelope event_from_json takes, and its first seq is
   *expected*: a row becomes its closed ChunkRun, an envelope its event, appended to the
   list *taken*. It stops at the first record that is not such and returns (its index,
   the seq expected there); the caller's rules take that record, and say what is wrong
   with it, so what a load accepts does not depend on this. */

static PyObject *text_name = NULL; /* "text": RawRecord.text */

/* *value*, the seq a decode expects next, into *expected*: 1; 0 when it is beyond 64 bits
   (no record can state it, so the caller's rules take the first record and say what is
   wrong with it); -1 with an exception set. A negative one is left for the caller's
   check of its arguments. */
static int
expected_seq(PyObject *value, long long *expected)
{
    int overflow = 0;
    *expected = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (*expected == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow < 0) {
        *expected = -1;
    }
    return overflow <= 0;
}

/* Append *item* (a new reference, taken) to *taken* and move *expected* on by *count*: 1,
   or -1 with an exception set. */
static int
hand_over(PyObject *taken, PyObject *item, long long *expected, Py_ssize_t count)
{
    int failed = PyList_Append(taken, item);
    Py_DECREF(item);
    if (failed) {
        return -1;
    }
    *expected += count;
    return 1;
}

/* Decode one record, the JSON text of *size* bytes at *bytes*: 1 when it was taken
   (*expected* moved on), 0 when it is left to the caller, -1 with an exception set. The
   object loads is given is *text*, or when that is NULL a slice of the memoryview *whole*
   from *first* (made only when a record needs loads). */
static int
decode_text(const unsigned char *bytes, Py_ssize_t size, PyObject *text, PyObject *whole,
            Py_ssize_t first, long long *expected, PyObject *taken, PyObject *loads)
{
    row_parts parts = {0};
    int found = parse_row_text(bytes, size, &parts);
    if (found != 0) {
        int done = found;
        if (found > 0 && parts.seq0 != *expected) {
            done = 0;
        }
        else if (found > 0) {
            PyObject *run = row_run(&parts);
            done = run == NULL ? -1 : hand_over(taken, run, expected, parts.members);
        }
        row_parts_free(&parts);
        return done;
    }
    row_parts_free(&parts);
    /* The writer's form parsed here, frozen as it goes; anything else by loads. */
    PyObject *envelope = parse_envelope_text(bytes, size);
    int parsed = envelope != NULL;
    if (!parsed) {
        if (PyErr_Occurred()) {
            return -1;
        }
        PyObject *sliced = text != NULL ? Py_NewRef(text)
                                        : PySequence_GetSlice(whole, first, first + size);
        envelope = sliced == NULL ? NULL : PyObject_CallOneArg(loads, sliced);
        Py_XDECREF(sliced);
        if (sliced == NULL) {
            return -1;
        }
    }
    if (envelope == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) {
            return -1;
        }
        PyErr_Clear(); /* not JSON, or nested deeper than loads reads: the caller's */
        return 0;
    }
    long long seq = -1;
    PyObject *event = event_of(envelope, parsed, &seq);
    Py_DECREF(envelope);
    if (event == NULL || event == Py_None) {
        Py_XDECREF(event);
        return event == NULL ? -1 : 0;
    }
    if (seq != *expected) {
        Py_DECREF(event);
        return 0;
    }
    return hand_over(taken, event, expected, 1);
}

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_records(list, start, stop, expected, taken: list, loads)");
        return NULL;
    }
    if (!events_ready() || !runs_ready()) {
        return NULL;
    }
    if (text_name == NULL && (text_name = PyUnicode_InternFromString("text")) == NULL) {
        return NULL;
    }
    PyObject *records = args[0];
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    long long expected;
    int usable = expected_seq(args[3], &expected);
    if (usable <= 0) {
        return usable < 0 ? NULL : Py_BuildValue("(nO)", index, args[3]);
    }
    if (index < 0 || expected < 0 || stop < index) {
        PyErr_SetString(PyExc_ValueError,
                        "decode_records: 0 <= start <= stop, and expected must be >= 0");
        return NULL;
    }
    /* The list is read afresh each time: loads could, in principle, change it. */
    while (index < stop && index < PyList_GET_SIZE(records)) {
        PyObject *record = Py_NewRef(PyList_GET_ITEM(records, index));
        PyObject *text = PyObject_GetAttr(record, text_name);
        Py_DECREF(record);
        if (text == NULL) {
            return NULL;
        }
        int taken = 0;
        Py_buffer view;
        if (text != Py_None) {
            if (PyObject_GetBuffer(text, &view, PyBUF_SIMPLE) < 0) {
                PyErr_Clear(); /* no bytes: the caller's */
            }
            else {
                taken = decode_text((const unsigned char *)view.buf, view.len, text, NULL, 0,
                                    &expected, args[4], args[5]);
                PyBuffer_Release(&view);
            }
        }
        Py_DECREF(text);
        if (taken < 0) {
            return NULL;
        }
        if (taken == 0) {
            break;
        }
        index++;
    }
    return Py_BuildValue("(nL)", index, expected);
}

/* The lines of a LineRecords: its bytes, where each record's line starts (-1 for a record
   of its own), and a memoryview of the bytes for loads. */
typedef struct {
    const unsigned char *base;
    Py_ssize_t size;
    const long long *starts;
    Py_ssize_t count;
    PyObject *view;
    Py_buffer buffer; /* the starts' */
} line_source;

/* *source*'s buffer as 8-byte native ints (an array("q")) whose size is a multiple of
   *group* of them: 0, or -1 with an exception set (a TypeError "name: problem" when it
   holds anything else) and nothing held. */
static int
int64_buffer(PyObject *source, Py_ssize_t group, Py_buffer *view, const char *name,
             const char *problem)
{
    if (PyObject_GetBuffer(source, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    if (view->itemsize != 8 || view->format == NULL || strcmp(view->format, "q") != 0
        || view->len % (8 * group) != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s: %s", name, problem);
        return -1;
    }
    return 0;
}

/* Fill *lines* from *data* (exact bytes) and *starts* (an array of 8-byte ints): 0, or -1
   with an exception set and nothing held. */
static int
lines_open(line_source *lines, PyObject *data, PyObject *starts, const char *name)
{
    if (int64_buffer(starts, 1, &lines->buffer, name, "starts must be an array of 8-byte ints")
        < 0) {
        return -1;
    }
    lines->view = PyMemoryView_FromObject(data);
    if (lines->view == NULL) {
        PyBuffer_Release(&lines->buffer);
        return -1;
    }
    lines->base = (const unsigned char *)PyBytes_AS_STRING(data);
    lines->size = PyBytes_GET_SIZE(data);
    lines->starts = (const long long *)lines->buffer.buf;
    lines->count = lines->buffer.len / 8;
    return 0;
}

static void
lines_close(line_source *lines)
{
    Py_DECREF(lines->view);
    PyBuffer_Release(&lines->buffer);
}

/* Decode records *index* up to *stop* of *lines* as decode_text takes each: the index it
   stopped at, or -1 with an exception set. */
static Py_ssize_t
decode_line_range(line_source *lines, Py_ssize_t index, Py_ssize_t stop, long long *expected,
                  PyObject *taken, PyObject *loads)
{
    for (; index < stop; index++) {
        long long first = lines->starts[index];
        if (first < 0 || first >= lines->size) {
            break; /* a record of its own, or nothing of data: the caller's */
        }
        const unsigned char *line = lines->base + first;
        const unsigned char *end = memchr(line, '\n', (size_t)(lines->size - first));
        if (end == NULL) {
            break;
        }
        int done = decode_text(line, end - line, NULL, lines->view, (Py_ssize_t)first, expected,
                               taken, loads);
        if (done < 0) {
            return -1;
        }
        if (done == 0) {
            break;
        }
    }
    return index;
}

/* decode_lines(data, starts, start, stop, expected, taken, loads): decode_records for the
   records of a lines.LineRecords: record k is the line of *data* that starts at
   starts[k] (an array of 8-byte ints; -1 for a record of its own, where it stops), up to
   its newline. From record *start* up to *stop*, each line is taken as decode_records
   takes a record's text; it returns (where it stopped, the seq expected there). */
static PyObject *
decode_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "decode_lines(data: bytes, starts, start, stop, "
                                         "expected, taken: list, loads)");
        return NULL;
    }
    if (!events_ready() || !runs_ready()) {
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[2]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    long long expected;
    int usable = expected_seq(args[4], &expected);
    if (usable <= 0) {
        return usable < 0 ? NULL : Py_BuildValue("(nO)", index, args[4]);
    }
    line_source lines;
    if (lines_open(&lines, args[0], args[1], "decode_lines") < 0) {
        return NULL;
    }
    if (index < 0 || expected < 0 || stop < index || stop > lines.count) {
        lines_close(&lines);
        PyErr_SetString(PyExc_ValueError, "decode_lines: 0 <= start <= stop <= len(starts), "
                                          "expected >= 0");
        return NULL;
    }
    index = decode_line_range(&lines, index, stop, &expected, args[5], args[6]);
    lines_close(&lines);
    return index < 0 ? NULL : Py_BuildValue("(nL)", index, expected);
}

/* decode_batches(data, starts, bounds, expected, taken, loads): decode_lines for a run of
   a framed log's batches in one call. *bounds* holds four 8-byte ints per batch: its first
   and end record, and the first and end seq its commit record states (-1 for none). A
   batch is taken whole when its stated first seq is the one expected, every record of it
   decodes, and it holds as many events as it states; the first that is not is left whole
   (whatever of it was appended to *taken* is taken off again) for the caller's rules,
   which say what is wrong with it. Returns (the batches taken, the seq expected after
   them). */
static PyObject *
decode_batches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "decode_batches(data: bytes, starts, bounds, "
                                         "expected, taken: list, loads)");
        return NULL;
    }
    if (!events_ready() || !runs_ready()) {
        return NULL;
    }
    long long expected;
    int usable = expected_seq(args[3], &expected);
    if (usable <= 0) {
        return usable < 0 ? NULL : Py_BuildValue("(nO)", (Py_ssize_t)0, args[3]);
    }
    if (expected < 0) {
        PyErr_SetString(PyExc_ValueError, "decode_batches: expected must be >= 0");
        return NULL;
    }
    line_source lines;
    if (lines_open(&lines, args[0], args[1], "decode_batches") < 0) {
        return NULL;
    }
    Py_buffer bounds;
    if (int64_buffer(args[2], 4, &bounds, "decode_batches",
                     "bounds must be an array of 8-byte ints, four per batch") < 0) {
        lines_close(&lines);
        return NULL;
    }
    const long long *bound = (const long long *)bounds.buf;
    Py_ssize_t batches = bounds.len / 32, done = 0;
    PyObject *taken = args[4];
    int failed = 0;
    for (; done < batches; done++, bound += 4) {
        long long start = bound[0], stop = bound[1], first = bound[2], end = bound[3];
        if (start < 0 || stop < start || stop > lines.count || (first >= 0 && first != expected)) {
            break;
        }
        Py_ssize_t mark = PyList_GET_SIZE(taken);
        long long before = expected;
        Py_ssize_t reached = decode_line_range(&lines, (Py_ssize_t)start, (Py_ssize_t)stop,
                                               &expected, taken, args[5]);
        if (reached < 0) {
            failed = 1;
            break;
        }
        if (reached != stop || (first >= 0 && end >= 0 && expected - before != end - first)) {
            expected = before; /* the rules take this batch whole */
            failed = PyList_SetSlice(taken, mark, PyList_GET_SIZE(taken), NULL) < 0;
            break;
        }
    }
    PyBuffer_Release(&bounds);
    lines_close(&lines);
    return failed ? NULL : Py_BuildValue("(nL)", done, expected);
}

/* line_starts(data, start, stop, begins): where each line of data[start:stop] (each ended
   by a newline) begins, packed as 8-byte ints in a bytes object, up to the first line that
   does not begin with *begins*; and where the lines taken end. lines.LineRecords'
   take_lines keeps them; pure_line_starts there is the same in Python. */
static PyObject *
line_starts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "line_starts(data: bytes, start, stop, begins: bytes)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    const char *base = PyBytes_AS_STRING(args[0]);
    if (start < 0 || stop > PyBytes_GET_SIZE(args[0]) || start > stop
        || (stop > start && base[stop - 1] != '\n')) {
        PyErr_SetString(PyExc_ValueError,
                        "line_starts: start:stop must be within data and end with a newline");
        return NULL;
    }
    const char *begins = PyBytes_AS_STRING(args[3]);
    size_t begins_size = (size_t)PyBytes_GET_SIZE(args[3]);
    Py_ssize_t room = 64, taken = 0;
    long long *found = PyMem_Malloc((size_t)room * sizeof(long long));
    if (found == NULL) {
        return PyErr_NoMemory();
    }
    const char *p = base + start, *end = base + stop;
    while (p < end) {
        const char *newline = memchr(p, '\n', (size_t)(end - p)); /* found: end[-1] is one */
        if ((size_t)(newline - p) < begins_size || memcmp(p, begins, begins_size) != 0) {
            break;
        }
        if (taken == room) {
            room *= 2;
            long long *more = PyMem_Realloc(found, (size_t)room * sizeof(long long));
            if (more == NULL) {
                PyMem_Free(found);
                return PyErr_NoMemory();
            }
            found = more;
        }
        found[taken++] = (long long)(p - base);
        p = newline + 1;
    }
    PyObject *packed = PyBytes_FromStringAndSize((const char *)found, taken * 8);
    PyMem_Free(found);
    return packed == NULL ? NULL : Py_BuildValue("(Nn)", packed, (Py_ssize_t)(p - base));
}

/* A run's slot *which* (its seq0 or end) as a list index into *out*: 1; 0 when it is
   beyond one (no log is that long: the Python form says what is wrong); -1 with an
   exception set. */
static int
run_index(PyObject *run, int which, Py_ssize_t *out)
{
    PyObject *descriptor = run_slots[which];
    PyObject *value = Py_TYPE(descriptor)->tp_descr_get(descriptor, run, NULL);
    *out = value == NULL ? -1 : PyLong_AsSsize_t(value);
    Py_XDECREF(value);
    if (*out == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return -1;
        }
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* Add the ChunkRun *run* (held) to *slots* once per member: 1, 0 when it does not follow
   the log (left to extend_segments), -1 with an exception set. */
static int
add_run(PyObject *slots, PyObject *run)
{
    Py_ssize_t seq0, stop;
    int known = run_index(run, RUN_SEQ0, &seq0);
    if (known > 0) {
        known = run_index(run, RUN_END, &stop);
    }
    if (known <= 0) {
        return known;
    }
    Py_ssize_t length = PyList_GET_SIZE(slots);
    if (seq0 != length || stop < seq0) {
        return 0; /* not right after the log: extend_segments says so */
    }
    if (stop == seq0) {
        return 1;
    }
    /* One insertion of the whole run: one resize of the list. */
    Py_ssize_t count = stop - seq0;
    PyObject *copies = PyList_New(count);
    if (copies == NULL) {
        return -1;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyList_SET_ITEM(copies, k, Py_NewRef(run));
    }
    /* Making the list may have run a finaliser that changed the log: if so, the Python
       form takes the run. */
    int added = PyList_GET_SIZE(slots) != length ? 0
                : PyList_SetSlice(slots, length, length, copies) < 0 ? -1 : 1;
    Py_DECREF(copies);
    return added;
}

/* Add the event *event* (held) to *slots*, untracked as EventLog.append leaves it: 1, or
   -1 with an exception set. */
static int
add_event(PyObject *slots, PyObject *event)
{
    if (PyList_Append(slots, event) < 0) {
        return -1;
    }
    /* As EventLog.append: an event, its provenance and op are never in a cycle. */
    PyObject *untracked[3] = {Py_NewRef(event), event_field(event, EVENT_SOURCES),
                              event_field(event, EVENT_SURFACE)};
    int failed = untracked[1] == NULL || untracked[2] == NULL;
    for (int k = 0; k < 3; k++) {
        if (!failed && PyObject_IS_GC(untracked[k]) && PyObject_GC_IsTracked(untracked[k])) {
            PyObject_GC_UnTrack(untracked[k]);
        }
        Py_XDECREF(untracked[k]);
    }
    return failed ? -1 : 1;
}

/* extend_slots(slots, segments, start): EventLog.extend_segments' loop. From
   segments[start] on, a ChunkRun whose seq0 is len(slots) adds itself once per member,
   and an event adds itself, untracked as EventLog.append leaves it (with its provenance
   and op). It stops at the first other item (a run that does not follow, anything that
   is neither) and returns its index, for extend_segments to take (and refuse). Each item
   is held while it is added: the list is the caller's, and a finaliser may change it. */
static PyObject *
extend_slots(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "extend_slots(slots: list, segments: list, start)");
        return NULL;
    }
    if (!events_ready() || !runs_ready()) {
        return NULL;
    }
    PyObject *slots = args[0], *segments = args[1];
    Py_ssize_t index = PyLong_AsSsize_t(args[2]);
    if (index == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "extend_slots: start must be >= 0");
        return NULL;
    }
    for (; index < PyList_GET_SIZE(segments); index++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(segments, index));
        int added = Py_TYPE(item) == run_type     ? add_run(slots, item)
                    : Py_TYPE(item) == event_type ? add_event(slots, item)
                                                  : 0;
        Py_DECREF(item);
        if (added < 0) {
            return NULL;
        }
        if (added == 0) {
            break;
        }
    }
    return PyLong_FromSsize_t(index);
}

/* The walks of EventLog's loose events (those no run holds): from seq *start* on, each
   event slot is visited once and each run is stepped over. */

/* The event slot at or after *seq* (a new reference, with its seq in *seq*), or NULL at
   the end; -1 in *error* with an exception set. The list is read afresh on each call:
   the caller's `types` may run Python code between two. */
static PyObject *
next_loose(PyObject *slots, Py_ssize_t *seq, int *error)
{
    while (*seq < PyList_GET_SIZE(slots)) {
        PyObject *slot = PyList_GET_ITEM(slots, *seq);
        if (Py_TYPE(slot) == event_type) {
            return Py_NewRef(slot);
        }
        PyObject *end = Py_TYPE(run_slots[RUN_END])->tp_descr_get(run_slots[RUN_END], slot, NULL);
        Py_ssize_t after = end == NULL ? -1 : PyLong_AsSsize_t(end);
        Py_XDECREF(end);
        if (after == -1 && PyErr_Occurred()) {
            *error = 1;
            return NULL;
        }
        *seq = after > *seq ? after : *seq + 1; /* past the run */
    }
    return NULL;
}

static int
walk_ready(PyObject *const *args, Py_ssize_t nargs, const char *usage, Py_ssize_t *start)
{
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    if (!events_ready() || !runs_ready()) {
        return 0;
    }
    *start = PyNumber_AsSsize_t(args[1], NULL); /* one past any list: nothing to walk */
    if (*start == -1 && PyErr_Occurred()) {
        return 0;
    }
    if (*start < 0) {
        *start = 0;
    }
    return 1;
}

/* loose_needing(slots, start, types): [(seq, event)] for each loose event from *start* on
   whose type is in *types*, that carries a surface op or provenance, or whose seq is not
   its place: what Session.restore must look at (eventlog's pure form decides alike). */
static PyObject *
loose_needing(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t seq;
    if (!walk_ready(args, nargs, "loose_needing(slots: list, start, types)", &seq)) {
        return NULL;
    }
    PyObject *slots = args[0], *types = args[2];
    PyObject *out = PyList_New(0);
    int error = 0;
    PyObject *event;
    while (out != NULL && (event = next_loose(slots, &seq, &error)) != NULL) {
        PyObject *fields[4] = {
            event_field(event, EVENT_TYPE), event_field(event, EVENT_SURFACE),
            event_field(event, EVENT_SOURCES), event_field(event, EVENT_SEQ),
        };
        int needed = -1;
        if (fields[0] != NULL && fields[1] != NULL && fields[2] != NULL && fields[3] != NULL) {
            needed = fields[1] != Py_None || fields[2] != Py_None;
            if (!needed) {
                Py_ssize_t stated = PyLong_Check(fields[3]) ? PyLong_AsSsize_t(fields[3]) : -1;
                if (stated == -1 && PyErr_Occurred()) {
                    PyErr_Clear(); /* beyond any place: misplaced */
                }
                needed = stated != seq;
            }
            if (!needed) {
                needed = PySequence_Contains(types, fields[0]);
            }
        }
        if (needed > 0) {
            PyObject *pair = Py_BuildValue("(nO)", seq, event);
            if (pair == NULL || PyList_Append(out, pair) < 0) {
                needed = -1;
            }
            Py_XDECREF(pair);
        }
        for (int k = 0; k < 4; k++) {
            Py_XDECREF(fields[k]);
        }
        Py_DECREF(event);
        if (needed < 0) {
            Py_CLEAR(out);
        }
        seq++;
    }
    if (error) {
        Py_CLEAR(out);
    }
    return out;
}

/* loose_outside(slots, start, types): the first loose (seq, event) from *start* on whose
   type is not in *types* and that is not marked ignorable, else None: an event a session
   going live could not interpret. */
static PyObject *
loose_outside(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t seq;
    if (!walk_ready(args, nargs, "loose_outside(slots: list, start, types)", &seq)) {
        return NULL;
    }
    PyObject *slots = args[0], *types = args[2];
    int error = 0;
    PyObject *event;
    while ((event = next_loose(slots, &seq, &error)) != NULL) {
        PyObject *type = event_field(event, EVENT_TYPE);
        int known = type == NULL ? -1 : PySequence_Contains(types, type);
        Py_XDECREF(type);
        if (known == 0) {
            PyObject *ignorable = event_field(event, EVENT_IGNORABLE);
            known = ignorable == NULL ? -1 : PyObject_IsTrue(ignorable);
            Py_XDECREF(ignorable);
            if (known == 0) {
                PyObject *found = Py_BuildValue("(nO)", seq, event);
                Py_DECREF(event);
                return found;
            }
        }
        Py_DECREF(event);
        if (known < 0) {
            return NULL;
        }
        seq++;
    }
    if (error) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* setup_runs(run_type): what runs are built as and logs extended with. Every slot of
   run_type must be one this file sets. */
static PyObject *
setup_runs(PyObject *module, PyObject *run_class)
{
    if (!PyType_Check(run_class)) {
        PyErr_SetString(PyExc_TypeError, "setup_runs(run_type: type)");
        return NULL;
    }
    if (run_type != NULL) {
        return set_again(run_type == (PyTypeObject *)run_class, "setup_runs");
    }
    PyObject *runs = run_class;
    PyObject *declared = PyObject_GetAttrString(runs, "__slots__");
    if (declared == NULL) {
        return NULL;
    }
    Py_ssize_t count = PyObject_Length(declared);
    Py_DECREF(declared);
    if (count != RUN_SLOTS) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "setup_runs: the run type has %zd slots, this "
                         "build sets %d", count, RUN_SLOTS);
        }
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (member_kind_objects[i] == NULL
            && (member_kind_objects[i] = PyUnicode_InternFromString(member_kinds[i])) == NULL) {
            return NULL;
        }
    }
    PyObject *found[RUN_SLOTS];
    if (slot_descriptors(runs, run_slot_names, RUN_SLOTS, found) < 0) {
        return NULL;
    }
    for (int i = 0; i < RUN_SLOTS; i++) {
        Py_XSETREF(run_slots[i], found[i]);
    }
    Py_INCREF(runs);
    Py_XSETREF(run_type, (PyTypeObject *)runs);
    Py_RETURN_NONE;
}

static PyObject *
setup_events(PyObject *module, PyObject *args)
{
    PyObject *events, *reserved, *append;
    if (!PyArg_ParseTuple(args, "O!O!U", &PyType_Type, &events, &PyFrozenSet_Type, &reserved,
                          &append)) {
        return NULL;
    }
    if (event_type != NULL) {
        return set_again(event_type == (PyTypeObject *)events && reserved_types == reserved
                             && append_op == append,
                         "setup_events");
    }
    static const char *const names[7] = {
        "type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable",
    };
    for (int i = 0; i < 7; i++) {
        if (envelope_keys[i] == NULL
            && (envelope_keys[i] = PyUnicode_InternFromString(names[i])) == NULL) {
            return NULL;
        }
    }
    if (shallow_name == NULL && (shallow_name = PyUnicode_InternFromString("_shallow")) == NULL) {
        return NULL;
    }
    PyObject *found[EVENT_SLOTS];
    if (slot_descriptors(events, event_slot_names, EVENT_SLOTS, found) < 0) {
        return NULL;
    }
    for (int i = 0; i < EVENT_SLOTS; i++) {
        Py_XSETREF(event_slots[i], found[i]);
    }
    Py_INCREF(events);
    Py_XSETREF(event_type, (PyTypeObject *)events);
    Py_XSETREF(reserved_types, Py_NewRef(reserved));
    Py_XSETREF(append_op, Py_NewRef(append));
    Py_RETURN_NONE;
}

/* ascending(seqs): whether *seqs*, a tuple of exact ints, rises strictly (so holds no
   duplicate, and its last item is its largest). False for anything else, the empty tuple
   and an int beyond 64 bits included: the caller's general checks then decide. An assistant message cites every
   delta of its stream, in order; a restore checks them all. */
static PyObject *
ascending(PyObject *module, PyObject *seqs)
{
    if (!PyTuple_CheckExact(seqs) || PyTuple_GET_SIZE(seqs) == 0) {
        Py_RETURN_FALSE;
    }
    Py_ssize_t size = PyTuple_GET_SIZE(seqs);
    long long previous = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *item = PyTuple_GET_ITEM(seqs, i);
        if (!PyLong_CheckExact(item)) {
            Py_RETURN_FALSE;
        }
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || (value == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        if (i > 0 && value <= previous) {
            Py_RETURN_FALSE;
        }
        previous = value;
    }
    Py_RETURN_TRUE;
}

static PyObject *
untrack(PyObject *module, PyObject *const *objects, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *object = objects[i];
        /* Only an object of a collected type has the header untracking clears. */
        if (PyObject_IS_GC(object) && PyObject_GC_IsTracked(object)) {
            PyObject_GC_UnTrack(object);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
setup(PyObject *module, PyObject *args)
{
    PyObject *type;
    long long safe;
    int depth;
    if (!PyArg_ParseTuple(args, "O!Li", &PyType_Type, &type, &safe, &depth)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)type, &PyDict_Type) || safe <= 0 || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "setup(dict subclass, positive limit, depth >= 0)");
        return NULL;
    }
    if (frozen_type != NULL) {
        return set_again(frozen_type == (PyTypeObject *)type && max_safe == safe
                             && max_depth == depth,
                         "setup");
    }
    Py_INCREF(type);
    Py_XSETREF(frozen_type, (PyTypeObject *)type);
    max_safe = safe;
    max_depth = depth;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(frozen_dict_type, max_safe_integer, max_depth): what the rules refer to."},
    {"freeze_mapping", freeze_mapping, METH_O,
     "Return the frozen copy of a dict the fast path accepts, else None."},
    {"freeze_sequence", freeze_sequence, METH_O,
     "Return the frozen copy (a tuple) of a list or tuple the fast path accepts, else None."},
    {"pack_run", pack_run, METH_VARARGS,
     "pack_run(texts, gaps, time0): (joined texts, end offsets) of a stored chunk row whose "
     "texts are strings and whose gaps fit, else None."},
    {"parse_row", parse_row, METH_O,
     "parse_row(text): a stored chunk row in the writer's exact form, decoded to (tag, seq0, "
     "turn, step, index, call id, name, joined texts, end offsets, member times), else None."},
    {"setup_events", setup_events, METH_VARARGS,
     "setup_events(event_type, reserved_types, append): what event_from_json builds."},
    {"make_event", (PyCFunction)(void (*)(void))make_event_compiled, METH_FASTCALL,
     "make_event(type, seq, time, data, surface_op, source_event_seqs, ignorable): the "
     "event of these fields, unvalidated."},
    {"setup_deltas", setup_deltas, METH_VARARGS,
     "setup_deltas(kinds, tool_kind): what freeze_delta looks kinds up in."},
    {"freeze_delta", freeze_delta, METH_O,
     "freeze_delta(data): (frozen data, run fields) of a well-formed streamed delta, else "
     "None."},
    {"parse_envelope", parse_envelope, METH_O,
     "parse_envelope(text): an envelope in the writer's form as orjson.loads parses it, its "
     "values frozen, else None."},
    {"event_from_json", event_from_json, METH_O,
     "event_from_json(envelope): the event from_json builds from a common envelope, else None."},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "decode_records(records, start, stop, expected, taken, loads): append to taken the run "
     "or event of each record from start up to stop while it is a row or an envelope of the common form "
     "whose seq is expected; return (where it stopped, the seq expected there)."},
    {"setup_runs", setup_runs, METH_O,
     "setup_runs(run_type): what runs are built as and logs extended with."},
    {"extend_slots", (PyCFunction)(void (*)(void))extend_slots, METH_FASTCALL,
     "extend_slots(slots, segments, start): add the runs that follow and the events from "
     "segments[start] on to a log's slots; return where it stopped."},
    {"decode_lines", (PyCFunction)(void (*)(void))decode_lines, METH_FASTCALL,
     "decode_lines(data, starts, start, stop, expected, taken, loads): decode_records for "
     "the lines of data that start at starts[start:stop]."},
    {"decode_batches", (PyCFunction)(void (*)(void))decode_batches, METH_FASTCALL,
     "decode_batches(data, starts, bounds, expected, taken, loads): decode_lines for whole "
     "batches; return (the batches taken, the seq expected after them)."},
    {"line_starts", (PyCFunction)(void (*)(void))line_starts, METH_FASTCALL,
     "line_starts(data, start, stop, begins): where each line of data[start:stop] begins, "
     "packed, up to the first not beginning with begins; and where they end."},
    {"loose_needing", (PyCFunction)(void (*)(void))loose_needing, METH_FASTCALL,
     "loose_needing(slots, start, types): [(seq, event)] of the loose events a restore must "
     "look at."},
    {"loose_outside", (PyCFunction)(void (*)(void))loose_outside, METH_FASTCALL,
     "loose_outside(slots, start, types): the first loose (seq, event) of a type not in "
     "types and not ignorable, else None."},
    {"ascending", ascending, METH_O,
     "ascending(seqs): whether a tuple of ints rises strictly (False for anything else)."},
    {"untrack", (PyCFunction)(void (*)(void))untrack, METH_FASTCALL,
     "untrack(*objects): stop the cyclic collector watching objects that can never be "
     "part of a reference cycle."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "sessionledger._freeze",
    "Compiled fast path of sessionledger.model._snapshot (optional; pure Python otherwise).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__freeze(void)
{
    no_args = PyTuple_New(0);
    if (no_args == NULL) {
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        row_tag_objects[i] = PyUnicode_InternFromString(row_tags[i]);
        if (row_tag_objects[i] == NULL) {
            return NULL;
        }
    }
    if (make_array_templates() < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
