/*
 * sessionledger._freeze: the compiled object-level helpers of sessionledger, each with a
 * pure-Python twin that decides the same (sessionledger._accelerator chooses which runs).
 *
 * No JSON is parsed here: msgspec decodes stored records (sessionledger.storage._decode). What
 * stays compiled is what a profile shows is worth it, one concern per file:
 *
 *   _freeze_values.c  freezing a JSON value (snapshot's fast path), packing a stored
 *                     row's texts (chunks.pack_run), untracking acyclic objects, and
 *                     whether provenance rises (surface)
 *   _freeze_events.c  an event built from its envelope's common form, or from its fields
 *                     (events), and a streamed delta frozen in one step (deltas)
 *   _freeze_log.c     the loops of an in-memory log over its slots (eventlog), and the
 *                     line scan of a JSONL log (lines)
 *   _freeze.c         the module: its state, the setup calls, the method table
 *
 * The module keeps what the setup calls hand it (the FrozenDict type, the event and run
 * types, the delta kinds, snapshot.mark_shallow) in its state (PEP 489 multi-phase
 * initialisation: one state per module object, no static globals). Nothing here writes a
 * private slot of a Python object: an event is built through its fields' descriptors, a
 * run's seq0 and end are only read, and a frozen value is marked shallow by calling
 * snapshot.mark_shallow.
 *
 * Python code can run inside almost any call made here: a dict lookup runs the __hash__
 * and __eq__ of a key that is not an exact str, and on CPython 3.11 any allocation of an
 * object the cyclic collector tracks may start a collection, whose finalisers (__del__,
 * weakref and gc callbacks) may change or empty the containers a caller passed in. So
 * each value read out of a caller's container is held by a strong reference from the
 * moment it is read until it is no longer used, and a container is read again, never
 * trusted, after such a call; only the arguments themselves, which the caller holds, are
 * borrowed. A value that changed under a helper makes it decline, and the Python form
 * decides (docs/internals.md; `nox -s sanitize` runs the tests that attack this under
 * AddressSanitizer).
 */
#include "_freeze.h"

/* The member descriptors of *type* named *names* (new references into *out*), each checked
   to be a slot: 0, or -1 with an exception set and nothing kept. */
int
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

static PyObject *
setup(PyObject *module, PyObject *args)
{
    freeze_state *st = state_of(module);
    PyObject *type, *marker = NULL;
    long long safe;
    int depth;
    if (!PyArg_ParseTuple(args, "O!Li|O", &PyType_Type, &type, &safe, &depth, &marker)) {
        return NULL;
    }
    if (marker != NULL && !PyCallable_Check(marker)) {
        PyErr_SetString(PyExc_TypeError, "setup: mark_shallow must be callable");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)type, &PyDict_Type) || safe <= 0 || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "setup(dict subclass, positive limit, depth >= 0)");
        return NULL;
    }
    if (st->frozen_type != NULL) {
        return set_again(st->frozen_type == (PyTypeObject *)type && st->max_safe == safe
                             && st->max_depth == depth && st->mark_shallow == marker,
                         "setup");
    }
    Py_INCREF(type);
    Py_XSETREF(st->frozen_type, (PyTypeObject *)type);
    Py_XSETREF(st->mark_shallow, Py_XNewRef(marker));
    st->max_safe = safe;
    st->max_depth = depth;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(frozen_dict_type, max_safe_integer, max_depth, mark_shallow=None): what the "
     "rules refer to."},
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

/* Every object the state holds, for the collector and for the module's teardown. */
static int
state_visit(freeze_state *st, visitproc visit, void *arg)
{
    Py_VISIT(st->frozen_type);
    Py_VISIT(st->no_args);
    Py_VISIT(st->mark_shallow);
    for (int i = 0; i < 2; i++) {
        Py_VISIT(st->array_templates[i]);
    }
    Py_VISIT(st->run_type);
    for (int i = 0; i < RUN_SLOTS; i++) {
        Py_VISIT(st->run_slots[i]);
    }
    Py_VISIT(st->event_type);
    for (int i = 0; i < EVENT_SLOTS; i++) {
        Py_VISIT(st->event_slots[i]);
    }
    Py_VISIT(st->reserved_types);
    Py_VISIT(st->append_op);
    for (int i = 0; i < 7; i++) {
        Py_VISIT(st->envelope_keys[i]);
    }
    for (int i = 0; i < DK_KEYS; i++) {
        Py_VISIT(st->delta_keys[i]);
    }
    Py_VISIT(st->delta_kinds);
    Py_VISIT(st->tool_kind);
    return 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    freeze_state *st = state_of(module);
    return st == NULL ? 0 : state_visit(st, visit, arg);
}

static int
drop(PyObject *object, void *arg)
{
    (void)arg;
    Py_DECREF(object); /* each visited once, and held once */
    return 0;
}

static int
module_clear(PyObject *module)
{
    freeze_state *st = state_of(module);
    if (st != NULL) {
        state_visit(st, (visitproc)drop, NULL);
        memset(st, 0, sizeof(*st));
    }
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* Py_mod_exec: the module's own objects, made when it is imported (so that no import runs
   inside a helper); what the setup calls hand it comes later. */
static int
module_exec(PyObject *module)
{
    freeze_state *st = state_of(module);
    st->max_depth = -1;
    st->no_args = PyTuple_New(0);
    if (st->no_args == NULL) {
        return -1;
    }
    return make_array_templates(st);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sessionledger._freeze",
    .m_doc = "The compiled helpers of sessionledger (optional; pure Python otherwise).",
    .m_size = sizeof(freeze_state),
    .m_methods = methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__freeze(void)
{
    return PyModuleDef_Init(&module_def);
}

