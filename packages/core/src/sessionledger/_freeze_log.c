/* The loops of an in-memory log (eventlog.EventLog) and the line scan of a JSONL log
   (lines.LineRecords), with no Python frame per item (docs/internals.md). */
#include "_freeze.h"

static const char *const run_slot_names[RUN_SLOTS] = {"seq0", "end"};

static int
runs_ready(freeze_state *st)
{
    if (st->run_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sessionledger._freeze.setup_runs() was not called");
        return 0;
    }
    return 1;
}

/* line_starts(data, start, stop, begins): where each line of data[start:stop] (each ended
   by a newline) begins, packed as 8-byte ints in a bytes object, up to the first line that
   does not begin with *begins*; and where the lines taken end. lines.LineRecords'
   take_lines keeps them; pure_line_starts there is the same in Python. */
PyObject *
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
run_index(freeze_state *st, PyObject *run, int which, Py_ssize_t *out)
{
    PyObject *descriptor = st->run_slots[which];
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
add_run(freeze_state *st, PyObject *slots, PyObject *run)
{
    Py_ssize_t seq0, stop;
    int known = run_index(st, run, RUN_SEQ0, &seq0);
    if (known > 0) {
        known = run_index(st, run, RUN_END, &stop);
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
add_event(freeze_state *st, PyObject *slots, PyObject *event)
{
    if (PyList_Append(slots, event) < 0) {
        return -1;
    }
    /* As EventLog.append: an event, its provenance and op are never in a cycle. */
    PyObject *untracked[3] = {Py_NewRef(event), event_field(st, event, EVENT_SOURCES),
                              event_field(st, event, EVENT_SURFACE)};
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
PyObject *
extend_slots(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    freeze_state *st = state_of(module);
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "extend_slots(slots: list, segments: list, start)");
        return NULL;
    }
    if (!events_ready(st) || !runs_ready(st)) {
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
        int added = Py_TYPE(item) == st->run_type     ? add_run(st, slots, item)
                    : Py_TYPE(item) == st->event_type ? add_event(st, slots, item)
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
next_loose(freeze_state *st, PyObject *slots, Py_ssize_t *seq, int *error)
{
    while (*seq < PyList_GET_SIZE(slots)) {
        PyObject *slot = PyList_GET_ITEM(slots, *seq);
        if (Py_TYPE(slot) == st->event_type) {
            return Py_NewRef(slot);
        }
        PyObject *end = Py_TYPE(st->run_slots[RUN_END])->tp_descr_get(st->run_slots[RUN_END], slot, NULL);
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
walk_ready(freeze_state *st, PyObject *const *args, Py_ssize_t nargs, const char *usage, Py_ssize_t *start)
{
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    if (!events_ready(st) || !runs_ready(st)) {
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
PyObject *
loose_needing(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    freeze_state *st = state_of(module);
    Py_ssize_t seq;
    if (!walk_ready(st, args, nargs, "loose_needing(slots: list, start, types)", &seq)) {
        return NULL;
    }
    PyObject *slots = args[0], *types = args[2];
    PyObject *out = PyList_New(0);
    int error = 0;
    PyObject *event;
    while (out != NULL && (event = next_loose(st, slots, &seq, &error)) != NULL) {
        PyObject *fields[4] = {
            event_field(st, event, EVENT_TYPE), event_field(st, event, EVENT_SURFACE),
            event_field(st, event, EVENT_SOURCES), event_field(st, event, EVENT_SEQ),
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
PyObject *
loose_outside(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    freeze_state *st = state_of(module);
    Py_ssize_t seq;
    if (!walk_ready(st, args, nargs, "loose_outside(slots: list, start, types)", &seq)) {
        return NULL;
    }
    PyObject *slots = args[0], *types = args[2];
    int error = 0;
    PyObject *event;
    while ((event = next_loose(st, slots, &seq, &error)) != NULL) {
        PyObject *type = event_field(st, event, EVENT_TYPE);
        int known = type == NULL ? -1 : PySequence_Contains(types, type);
        Py_XDECREF(type);
        if (known == 0) {
            PyObject *ignorable = event_field(st, event, EVENT_IGNORABLE);
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


/* setup_runs(run_type): the type of the runs a log is extended with, and the slots of
   it that are read here (seq0 and end; none is written). */
PyObject *
setup_runs(PyObject *module, PyObject *run_class)
{
    freeze_state *st = state_of(module);
    if (!PyType_Check(run_class)) {
        PyErr_SetString(PyExc_TypeError, "setup_runs(run_type: type)");
        return NULL;
    }
    if (st->run_type != NULL) {
        return set_again(st->run_type == (PyTypeObject *)run_class, "setup_runs");
    }
    PyObject *runs = run_class;
    PyObject *found[RUN_SLOTS];
    if (slot_descriptors(runs, run_slot_names, RUN_SLOTS, found) < 0) {
        return NULL;
    }
    for (int i = 0; i < RUN_SLOTS; i++) {
        Py_XSETREF(st->run_slots[i], found[i]);
    }
    Py_INCREF(runs);
    Py_XSETREF(st->run_type, (PyTypeObject *)runs);
    Py_RETURN_NONE;
}
