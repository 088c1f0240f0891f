/* Frozen JSON values, packed runs and untracking: sessionledger.model._snapshot's and
   sessionledger.storage._chunks' object-level helpers (docs/internals.md). */
#include "_freeze.h"

enum kind { BAD = 0, SCALAR = 1, MAPPING = 2, SEQUENCE = 3 };

int
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

int
is_mapping(freeze_state *st, PyObject *value)
{
    return Py_TYPE(value) == &PyDict_Type || Py_TYPE(value) == st->frozen_type;
}

/* The value of *key* in the dict *mapping* as a new reference; NULL when absent (no
   exception set) or on an error. The lookup may run Python code (the __hash__ or __eq__
   of a key that is not an exact str) that changes the dict or drops the key: the key is
   held while it is looked up, the value from the moment it is found. */
PyObject *
lookup(PyObject *mapping, PyObject *key)
{
    Py_INCREF(key);
    PyObject *value = PyDict_GetItemWithError(mapping, key);
    Py_XINCREF(value);
    Py_DECREF(key);
    return value;
}

static enum kind
kind_of(freeze_state *st, PyObject *item)
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
        return (value >= -st->max_safe && value <= st->max_safe) ? SCALAR : BAD;
    }
    if (item == Py_None || type == &PyBool_Type) {
        return SCALAR;
    }
    if (type == &PyDict_Type || type == st->frozen_type) {
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
static PyObject *freeze_seq(freeze_state *st, PyObject *source, int depth);

static PyObject *
freeze_child(freeze_state *st, PyObject *item, enum kind kind, int depth)
{
    return kind == MAPPING ? freeze_map(st, item, depth + 1) : freeze_seq(st, item, depth + 1);
}

PyObject *
freeze_map(freeze_state *st, PyObject *source, int depth)
{
    if (depth > st->max_depth) {
        return NULL;
    }
    PyObject *out = st->frozen_type->tp_new(st->frozen_type, st->no_args, NULL);
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
            enum kind kind = kind_of(st, item);
            if (kind == SCALAR) {
                value = item;
                Py_INCREF(value);
            }
            else if (kind != BAD) {
                value = freeze_child(st, item, kind, depth);
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
freeze_seq(freeze_state *st, PyObject *source, int depth)
{
    if (depth > st->max_depth) {
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
        enum kind kind = kind_of(st, item);
        PyObject *value = NULL;
        if (kind == SCALAR) {
            value = item;
            Py_INCREF(value);
        }
        else if (kind != BAD) {
            value = freeze_child(st, item, kind, depth);
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

PyObject *
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
PyObject *
set_again(int same, const char *name)
{
    if (!same) {
        PyErr_Format(PyExc_RuntimeError,
                     "sessionledger._freeze.%s: already set up with other objects", name);
        return NULL;
    }
    Py_RETURN_NONE;
}

int
ready(freeze_state *st)
{
    if (st->frozen_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup() was not called");
        return 0;
    }
    return 1;
}

PyObject *
freeze_mapping(PyObject *module, PyObject *source)
{
    freeze_state *st = state_of(module);
    if (!ready(st)) {
        return NULL;
    }
    if (Py_TYPE(source) != &PyDict_Type && Py_TYPE(source) != st->frozen_type) {
        Py_RETURN_NONE;
    }
    PyObject *out = freeze_map(st, source, 0);
    return out != NULL ? out : none_unless_error();
}

PyObject *
freeze_sequence(PyObject *module, PyObject *source)
{
    freeze_state *st = state_of(module);
    if (!ready(st)) {
        return NULL;
    }
    if (!PyList_CheckExact(source) && !PyTuple_CheckExact(source)) {
        Py_RETURN_NONE;
    }
    PyObject *out = freeze_seq(st, source, 0);
    return out != NULL ? out : none_unless_error();
}

/* One empty-of-meaning array per item code ("I", "q"), made when the module is imported
   (so that no import runs inside a helper): an array of *size* items is the template
   repeated, then filled through its buffer. Two calls into the array module per array,
   neither parsing arguments nor running Python code. */

int
make_array_templates(freeze_state *st)
{
    PyObject *module = PyImport_ImportModule("array");
    if (module == NULL) {
        return -1;
    }
    static const char *const kinds[2] = {"I", "q"};
    for (int which = 0; which < 2; which++) {
        st->array_templates[which] = PyObject_CallMethod(module, "array", "s[i]", kinds[which], 0);
        if (st->array_templates[which] == NULL) {
            Py_DECREF(module);
            return -1;
        }
    }
    Py_DECREF(module);
    return 0;
}

static PyObject *
make_array(freeze_state *st, const char *kind, const void *items, Py_ssize_t size)
{
    int which = kind[0] == 'q';
    Py_buffer one;
    if (PyObject_GetBuffer(st->array_templates[which], &one, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t width = one.len;
    PyBuffer_Release(&one);
    if (width <= 0 || size % width != 0) {
        PyErr_SetString(PyExc_SystemError, "make_array: size is not a whole number of items");
        return NULL;
    }
    PyObject *out = PySequence_Repeat(st->array_templates[which], size / width);
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
PyObject *
pack_run(PyObject *module, PyObject *args)
{
    freeze_state *st = state_of(module);
    PyObject *texts, *gaps, *start;
    if (!ready(st) || !PyArg_ParseTuple(args, "OOO", &texts, &gaps, &start)) {
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
    if (time < -st->max_safe || time > st->max_safe) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < steps; i++) {
        PyObject *gap = deltas[i];
        if (!PyLong_CheckExact(gap)) {
            Py_RETURN_NONE;
        }
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(gap, &overflow);
        if (overflow || value < -st->max_safe || value > st->max_safe) {
            Py_RETURN_NONE;
        }
        time += value; /* |time| and |value| <= 2**53: no overflow */
        if (time < -st->max_safe || time > st->max_safe) {
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
    PyObject *offsets = make_array(st, narrow ? "I" : "q", ends, size * (Py_ssize_t)width);
    PyMem_Free(ends);
    if (offsets == NULL) {
        Py_DECREF(joined);
        return NULL;
    }
    return Py_BuildValue("(NN)", joined, offsets);
}


/* ascending(seqs): whether *seqs*, a tuple of exact ints, rises strictly (so holds no
   duplicate, and its last item is its largest). False for anything else, the empty tuple
   and an int beyond 64 bits included: the caller's general checks then decide. An assistant message cites every
   delta of its stream, in order; a restore checks them all. */
PyObject *
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

PyObject *
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
