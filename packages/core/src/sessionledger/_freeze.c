/*
 * sessionledger._freeze: the compiled form of snapshot's fast path.
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

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

static PyObject *array_type = NULL; /* array.array, imported on first use */

static PyObject *
make_array(const char *kind, const void *items, Py_ssize_t size)
{
    if (array_type == NULL) {
        PyObject *module = PyImport_ImportModule("array");
        if (module == NULL) {
            return NULL;
        }
        array_type = PyObject_GetAttrString(module, "array");
        Py_DECREF(module);
        if (array_type == NULL) {
            return NULL;
        }
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)items, size);
    if (raw == NULL) {
        return NULL;
    }
    PyObject *out = PyObject_CallFunction(array_type, "sO", kind, raw);
    Py_DECREF(raw);
    if (out != NULL) {
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
    PyObject *offsets = make_array(narrow ? "I" : "q", ends, size * (Py_ssize_t)width);
    PyMem_Free(ends);
    if (offsets == NULL) {
        return NULL;
    }
    PyObject *empty = PyUnicode_New(0, 0);
    PyObject *joined = empty == NULL ? NULL : PyUnicode_Join(empty, texts);
    Py_XDECREF(empty);
    if (joined == NULL) {
        Py_DECREF(offsets);
        return NULL;
    }
    if ((unsigned long long)PyUnicode_GET_LENGTH(joined) != end) {
        /* A text changed while the array was made (no Python code runs here, but
           the array module's import may): the careful path decides. */
        Py_DECREF(joined);
        Py_DECREF(offsets);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NN)", joined, offsets);
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
    {"untrack", (PyCFunction)(void (*)(void))untrack, METH_FASTCALL,
     "untrack(*objects): stop the cyclic collector watching objects that can never be "
     "part of a reference cycle."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "sessionledger._freeze",
    "Compiled fast path of sessionledger.snapshot (optional; pure Python otherwise).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__freeze(void)
{
    no_args = PyTuple_New(0);
    if (no_args == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
