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
    {"event_from_json", event_from_json, METH_O,
     "event_from_json(envelope): the event from_json builds from a common envelope, else None."},
    {"setup_runs", setup_runs, METH_O,
     "setup_runs(run_type): what runs are built as and logs extended with."},
    {"extend_slots", (PyCFunction)(void (*)(void))extend_slots, METH_FASTCALL,
     "extend_slots(slots, segments, start): add the runs that follow and the events from "
     "segments[start] on to a log's slots; return where it stopped."},
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
    if (make_array_templates() < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
