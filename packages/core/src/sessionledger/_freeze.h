/*
 * The compiled helpers of sessionledger, shared between the files of the one extension
 * module sessionledger._freeze: the module's state and the helpers more than one file
 * uses. docs/internals.md says what each file holds and why it is compiled.
 */
#ifndef SESSIONLEDGER_FREEZE_H
#define SESSIONLEDGER_FREEZE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Functions shared between the files stay inside the extension's shared object. */
#if defined(__GNUC__) || defined(__clang__)
#define SL_HIDDEN __attribute__((visibility("hidden")))
#else
#define SL_HIDDEN
#endif



/* The slots read of a run (eventlog.ChunkRun): where it starts and ends. */
enum { RUN_SEQ0, RUN_END, RUN_SLOTS };

/* SessionEvent's slots (its fields), set and read through their descriptors: an event is
   built by _freeze_events.c as make_event builds it, with no Python frame. */
enum {
    EVENT_TYPE, EVENT_SEQ, EVENT_TIME, EVENT_DATA, EVENT_SURFACE, EVENT_SOURCES,
    EVENT_IGNORABLE, EVENT_SLOTS
};

enum { DK_TURN, DK_STEP, DK_CHUNK, DK_TYPE, DK_INDEX, DK_TEXT, DK_ID, DK_NAME, DK_ARGS, DK_KEYS };


/* What the setup calls hand the module, kept in its state (PEP 489: one per module
   object, reached from the module each function is called with). */
typedef struct {
    PyTypeObject *frozen_type; /* FrozenDict, set by setup() */
    PyObject *no_args;         /* () for FrozenDict's tp_new */
    long long max_safe;        /* MAX_SAFE_INTEGER */
    int max_depth;             /* _FAST_DEPTH: nesting handled before a retry */
    PyObject *mark_shallow;    /* snapshot.mark_shallow: FrozenDict's own setter */
    PyObject *array_templates[2];
    PyTypeObject *run_type;    /* eventlog.ChunkRun, set by setup_runs() */
    PyObject *run_slots[RUN_SLOTS];
    PyTypeObject *event_type;  /* events.SessionEvent, set by setup_events() */
    PyObject *event_slots[EVENT_SLOTS];
    PyObject *reserved_types;  /* RESERVED_TYPES: types a stored event cannot have */
    PyObject *append_op;       /* events.APPEND */
    PyObject *envelope_keys[7];
    PyObject *delta_keys[DK_KEYS];
    PyObject *delta_kinds;     /* deltas._KINDS: each kind, to its canonical str */
    PyObject *tool_kind;       /* deltas._TOOL_KIND */
} freeze_state;

static inline freeze_state *
state_of(PyObject *module)
{
    return (freeze_state *)PyModule_GetState(module);
}

/* The shared helpers (each file's comments say what they do). */
SL_HIDDEN int string_fits(PyObject *text);
SL_HIDDEN int is_mapping(freeze_state *st, PyObject *value);
SL_HIDDEN PyObject *lookup(PyObject *mapping, PyObject *key);
SL_HIDDEN PyObject *freeze_map(freeze_state *st, PyObject *source, int depth);
SL_HIDDEN PyObject *none_unless_error(void);
SL_HIDDEN PyObject *set_again(int same, const char *name);
SL_HIDDEN int ready(freeze_state *st);
SL_HIDDEN int make_array_templates(freeze_state *st);
SL_HIDDEN int events_ready(freeze_state *st);
SL_HIDDEN PyObject *event_field(freeze_state *st, PyObject *event, int which);
SL_HIDDEN int slot_descriptors(PyObject *type, const char *const *names, int count, PyObject **out);
SL_HIDDEN PyObject *freeze_mapping(PyObject *module, PyObject *source);
SL_HIDDEN PyObject *freeze_sequence(PyObject *module, PyObject *source);
SL_HIDDEN PyObject *pack_run(PyObject *module, PyObject *args);
SL_HIDDEN PyObject *event_from_json(PyObject *module, PyObject *envelope);
SL_HIDDEN PyObject *make_event_compiled(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
SL_HIDDEN PyObject *freeze_delta(PyObject *module, PyObject *data);
SL_HIDDEN PyObject *setup_deltas(PyObject *module, PyObject *args);
SL_HIDDEN PyObject *line_starts(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
SL_HIDDEN PyObject *extend_slots(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
SL_HIDDEN PyObject *loose_needing(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
SL_HIDDEN PyObject *loose_outside(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
SL_HIDDEN PyObject *setup_runs(PyObject *module, PyObject *run_class);
SL_HIDDEN PyObject *setup_events(PyObject *module, PyObject *args);
SL_HIDDEN PyObject *ascending(PyObject *module, PyObject *seqs);
SL_HIDDEN PyObject *untrack(PyObject *module, PyObject *const *objects, Py_ssize_t count);

#endif
