/* Events and streamed deltas built without a Python frame: events.SessionEvent.from_json's
   common case, events.make_event and deltas.freeze_delta (docs/internals.md). */
#include "_freeze.h"

static const char *const event_slot_names[EVENT_SLOTS] = {
    "type", "seq", "time", "data", "surface_op", "source_event_seqs", "ignorable",
};
static const char *const delta_key_names[DK_KEYS] = {
    "turn", "step", "chunk", "type", "index", "text", "id", "name", "argumentsDelta",
};

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

int
events_ready(freeze_state *st)
{
    if (!ready(st)) {
        return 0;
    }
    if (st->event_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup_events() was not called");
        return 0;
    }
    return 1;
}

/* Mark *frozen* proved shallow through snapshot.mark_shallow (set up by setup()): its
   slot is FrozenDict's own, never written from here. 0, or -1 with an exception set. */
static int
mark(freeze_state *st, PyObject *frozen)
{
    if (st->mark_shallow == NULL) {
        return 0;
    }
    PyObject *done = PyObject_CallOneArg(st->mark_shallow, frozen);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* The event of *fields* (borrowed, in event_slot_names' order): what make_event builds,
   an instance of SessionEvent with its slots set, made without a Python call. */
static PyObject *
build_event(freeze_state *st, PyObject *const *fields)
{
    PyObject *event = st->event_type->tp_alloc(st->event_type, 0);
    if (event == NULL) {
        return NULL;
    }
    for (int i = 0; i < EVENT_SLOTS; i++) {
        PyObject *descriptor = st->event_slots[i];
        if (Py_TYPE(descriptor)->tp_descr_set(descriptor, event, fields[i]) < 0) {
            Py_DECREF(event);
            return NULL;
        }
    }
    return event;
}

/* An event's field *which* (a new reference), read through its slot. */
PyObject *
event_field(freeze_state *st, PyObject *event, int which)
{
    PyObject *descriptor = st->event_slots[which];
    return Py_TYPE(descriptor)->tp_descr_get(descriptor, event, NULL);
}

/* sourceEventSeqs (a list or tuple the caller holds) as an event keeps it: a tuple of
   safe non-negative ints; None when an item is anything else, NULL on an error. The tuple
   is allocated before a list's items are read (the allocation may start a collection
   whose finalisers change the list), and a list that changed meanwhile is declined. */
static PyObject *
seqs_of(freeze_state *st, PyObject *sources)
{
    if (PyTuple_CheckExact(sources)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sources); i++) {
            if (!int_within(PyTuple_GET_ITEM(sources, i), 0, st->max_safe)) {
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
        if (!int_within(item, 0, st->max_safe)) {
            Py_DECREF(seqs);
            Py_RETURN_NONE;
        }
        PyTuple_SET_ITEM(seqs, i, Py_NewRef(item));
    }
    return seqs;
}

/* The event of an envelope's *fields* (each held, NULL when absent, the required four
   there), or None, or NULL with an error. */
static PyObject *
event_of_fields(freeze_state *st, PyObject *const *fields)
{
    PyObject *type = fields[KEY_TYPE], *data = fields[KEY_DATA];
    PyObject *surface = fields[KEY_SURFACE], *sources = fields[KEY_SOURCES];
    PyObject *ignorable = fields[KEY_IGNORABLE];
    if (!PyUnicode_CheckExact(type) || PyUnicode_GET_LENGTH(type) == 0
        || !int_within(fields[KEY_SEQ], 0, st->max_safe)
        || !int_within(fields[KEY_TIME], -st->max_safe, st->max_safe)
        || (ignorable != NULL && ignorable != Py_True)
        || !is_mapping(st, data)) {
        Py_RETURN_NONE;
    }
    int reserved = PySet_Contains(st->reserved_types, type);
    if (reserved != 0) {
        return reserved < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *op = Py_None;
    if (surface != NULL) {
        if (!PyUnicode_CheckExact(surface) || PyUnicode_Compare(surface, st->append_op) != 0) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE; /* a replace, or no op at all: from_json parses or refuses it */
        }
        op = st->append_op;
    }
    PyObject *seqs = sources != NULL ? seqs_of(st, sources) : NULL;
    if (seqs == Py_None || (seqs == NULL && PyErr_Occurred())) {
        return seqs;
    }
    PyObject *frozen = freeze_map(st, data, 0);
    if (frozen == NULL) {
        Py_XDECREF(seqs);
        return none_unless_error();
    }
    PyObject *event = NULL;
    if (mark(st, frozen) == 0) {
        PyObject *values[EVENT_SLOTS] = {
            type, fields[KEY_SEQ], fields[KEY_TIME], frozen, op,
            seqs != NULL ? seqs : Py_None, ignorable != NULL ? Py_True : Py_False,
        };
        event = build_event(st, values);
    }
    Py_DECREF(frozen);
    Py_XDECREF(seqs);
    return event;
}

/* The body of event_from_json, once both setups ran. Each field is held while the
   event is made (see _freeze.c). */
static PyObject *
event_of(freeze_state *st, PyObject *envelope)
{
    if (!PyDict_CheckExact(envelope)) {
        Py_RETURN_NONE;
    }
    PyObject *fields[7] = {NULL};
    Py_ssize_t found = 0;
    int failed = 0;
    for (int key = 0; key < 7 && !failed; key++) {
        fields[key] = lookup(envelope, st->envelope_keys[key]);
        found += fields[key] != NULL;
        failed = fields[key] == NULL && PyErr_Occurred();
    }
    PyObject *event = NULL;
    if (!failed) {
        /* Every key one of the envelope's (none unknown), the required four among them. */
        int whole = found == PyDict_GET_SIZE(envelope) && fields[KEY_TYPE] != NULL
                    && fields[KEY_SEQ] != NULL && fields[KEY_TIME] != NULL
                    && fields[KEY_DATA] != NULL;
        event = whole ? event_of_fields(st, fields) : Py_NewRef(Py_None);
    }
    for (int key = 0; key < 7; key++) {
        Py_XDECREF(fields[key]);
    }
    return event;
}

PyObject *
event_from_json(PyObject *module, PyObject *envelope)
{
    freeze_state *st = state_of(module);
    return events_ready(st) ? event_of(st, envelope) : NULL;
}

/* make_event(type, seq, time, data, surface_op, source_event_seqs, ignorable): the event of
   these fields, unvalidated, as events.make_event builds it (build_event). */
PyObject *
make_event_compiled(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    freeze_state *st = state_of(module);
    if (nargs != EVENT_SLOTS) {
        PyErr_SetString(PyExc_TypeError, "make_event takes the event's seven fields");
        return NULL;
    }
    return events_ready(st) ? build_event(st, args) : NULL;
}

/* -- a streamed delta validated and frozen in one step (deltas.freeze_delta) ----------- */

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
tool_read(freeze_state *st, PyObject *chunk, delta_parts *parts)
{
    int missing = 0;
    Py_ssize_t size = PyDict_GET_SIZE(chunk);
    if (size < 4 || size > 5) {
        return 0;
    }
    if ((parts->call_id = item(chunk, st->delta_keys[DK_ID], &missing)) == NULL
        || (parts->text = item(chunk, st->delta_keys[DK_ARGS], &missing)) == NULL
        || (size == 5 && (parts->name = item(chunk, st->delta_keys[DK_NAME], &missing)) == NULL)) {
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
delta_read(freeze_state *st, PyObject *data, delta_parts *parts)
{
    int missing = 0;
    if ((parts->chunk = item(data, st->delta_keys[DK_CHUNK], &missing)) == NULL
        || (parts->turn = item(data, st->delta_keys[DK_TURN], &missing)) == NULL
        || (parts->step = item(data, st->delta_keys[DK_STEP], &missing)) == NULL) {
        return missing ? 0 : -1;
    }
    PyObject *chunk = parts->chunk;
    if (!is_mapping(st, chunk) || !int_within(parts->turn, 1, st->max_safe)
        || !int_within(parts->step, 1, st->max_safe)) {
        return 0;
    }
    if ((parts->stated = item(chunk, st->delta_keys[DK_TYPE], &missing)) == NULL
        || (parts->kind = item(st->delta_kinds, parts->stated, &missing)) == NULL
        || (parts->index = item(chunk, st->delta_keys[DK_INDEX], &missing)) == NULL) {
        return missing ? 0 : -1;
    }
    if (!int_within(parts->index, 0, st->max_safe)) {
        return 0;
    }
    int fits = parts->kind == st->tool_kind ? tool_read(st, chunk, parts) : 1;
    if (fits > 0 && parts->kind != st->tool_kind) {
        if ((parts->text = item(chunk, st->delta_keys[DK_TEXT], &missing)) == NULL) {
            return missing ? 0 : -1;
        }
        fits = PyDict_GET_SIZE(chunk) == 3;
    }
    return fits <= 0 ? fits : PyUnicode_CheckExact(parts->text) && string_fits(parts->text);
}

/* A FrozenDict of *count* keys and values (the caller holds them), untracked (it holds
   scalars and frozen values only). */
static PyObject *
frozen_of(freeze_state *st, PyObject *const *keys, PyObject *const *values, int count)
{
    PyObject *out = st->frozen_type->tp_new(st->frozen_type, st->no_args, NULL);
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
delta_frozen(freeze_state *st, const delta_parts *parts)
{
    PyObject *kind = parts->kind, *index = parts->index, *text = parts->text;
    PyObject *call_id = parts->call_id, *name = parts->name;
    PyObject *frozen_chunk;
    if (call_id == NULL) {
        PyObject *keys[3] = {st->delta_keys[DK_TYPE], st->delta_keys[DK_INDEX], st->delta_keys[DK_TEXT]};
        PyObject *values[3] = {kind, index, text};
        frozen_chunk = frozen_of(st, keys, values, 3);
    }
    else if (name == NULL) {
        PyObject *keys[4] = {st->delta_keys[DK_TYPE], st->delta_keys[DK_INDEX], st->delta_keys[DK_ID],
                             st->delta_keys[DK_ARGS]};
        PyObject *values[4] = {kind, index, call_id, text};
        frozen_chunk = frozen_of(st, keys, values, 4);
    }
    else {
        PyObject *keys[5] = {st->delta_keys[DK_TYPE], st->delta_keys[DK_INDEX], st->delta_keys[DK_ID],
                             st->delta_keys[DK_NAME], st->delta_keys[DK_ARGS]};
        PyObject *values[5] = {kind, index, call_id, name, text};
        frozen_chunk = frozen_of(st, keys, values, 5);
    }
    if (frozen_chunk == NULL) {
        return NULL;
    }
    PyObject *keys[3] = {st->delta_keys[DK_TURN], st->delta_keys[DK_STEP], st->delta_keys[DK_CHUNK]};
    PyObject *values[3] = {parts->turn, parts->step, frozen_chunk};
    PyObject *frozen = frozen_of(st, keys, values, 3);
    Py_DECREF(frozen_chunk);
    if (frozen == NULL || mark(st, frozen) < 0) {
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
delta_of(freeze_state *st, PyObject *data)
{
    if (!is_mapping(st, data) || PyDict_GET_SIZE(data) != 3) {
        Py_RETURN_NONE;
    }
    delta_parts parts = {NULL};
    int found = delta_read(st, data, &parts);
    PyObject *out = found < 0 ? NULL : found == 0 ? Py_NewRef(Py_None) : delta_frozen(st, &parts);
    delta_parts_clear(&parts);
    return out;
}

PyObject *
freeze_delta(PyObject *module, PyObject *data)
{
    freeze_state *st = state_of(module);
    if (!events_ready(st)) {
        return NULL;
    }
    if (st->delta_kinds == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup_deltas() was not called");
        return NULL;
    }
    return delta_of(st, data);
}

/* setup_deltas(kinds, tool_kind): deltas._KINDS and deltas._TOOL_KIND. */
PyObject *
setup_deltas(PyObject *module, PyObject *args)
{
    freeze_state *st = state_of(module);
    PyObject *kinds, *tool;
    if (!PyArg_ParseTuple(args, "O!U", &PyDict_Type, &kinds, &tool)) {
        return NULL;
    }
    if (st->delta_kinds != NULL) {
        return set_again(st->delta_kinds == kinds && st->tool_kind == tool, "setup_deltas");
    }
    for (int i = 0; i < DK_KEYS; i++) {
        if (st->delta_keys[i] == NULL
            && (st->delta_keys[i] = PyUnicode_InternFromString(delta_key_names[i])) == NULL) {
            return NULL;
        }
    }
    Py_XSETREF(st->delta_kinds, Py_NewRef(kinds));
    Py_XSETREF(st->tool_kind, Py_NewRef(tool));
    Py_RETURN_NONE;
}


PyObject *
setup_events(PyObject *module, PyObject *args)
{
    freeze_state *st = state_of(module);
    PyObject *events, *reserved, *append;
    if (!PyArg_ParseTuple(args, "O!O!U", &PyType_Type, &events, &PyFrozenSet_Type, &reserved,
                          &append)) {
        return NULL;
    }
    if (st->event_type != NULL) {
        return set_again(st->event_type == (PyTypeObject *)events && st->reserved_types == reserved
                             && st->append_op == append,
                         "setup_events");
    }
    static const char *const names[7] = {
        "type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable",
    };
    for (int i = 0; i < 7; i++) {
        if (st->envelope_keys[i] == NULL
            && (st->envelope_keys[i] = PyUnicode_InternFromString(names[i])) == NULL) {
            return NULL;
        }
    }
    PyObject *found[EVENT_SLOTS];
    if (slot_descriptors(events, event_slot_names, EVENT_SLOTS, found) < 0) {
        return NULL;
    }
    for (int i = 0; i < EVENT_SLOTS; i++) {
        Py_XSETREF(st->event_slots[i], found[i]);
    }
    Py_INCREF(events);
    Py_XSETREF(st->event_type, (PyTypeObject *)events);
    Py_XSETREF(st->reserved_types, Py_NewRef(reserved));
    Py_XSETREF(st->append_op, Py_NewRef(append));
    Py_RETURN_NONE;
}
