/* The compiled core of the graph runner's step: the common case of GraphRunner.step, in C.
 *
 * The reference implementation, and the fallback for everything uncommon, is Python (graphs.py):
 *   RunnerState.compiled_step  mirrors  GraphRunner.step's plain case: the plain route looked up, the
 *                                       fast match (inputs.py fits: the route's fit check first, the
 *                                       full match on a miss, fit_checks.py), then the route run
 *   RunnerState.compiled_run   mirrors  GraphRunner._run: the timing decision and the clock's
 *                                       record_start / stop, the copies into the static rows, the pad
 *                                       rows, the launch, the outputs, the route's count, the step event
 * Anything else (no route yet, inputs that do not fit, a reason, adapters or a grammar switch,
 * parity checks on, inputs that are not a dict, other arguments) is handed, before anything is
 * done, to GraphRunner's own Python (_python_step / _python_run): one behaviour, two speeds. The
 * clock, the emitter, the buffers and the routes stay Python: the core calls their methods.
 * The runner's step fields live in RunnerState's struct (the plain routes, the pad-row mark
 * _dirty_until, the clock, the record callable...), which Python reads and writes as ordinary
 * attributes (member descriptors): GraphRunner inherits RunnerState (runner_core.py, graphs.py),
 * so each field has one place whichever core runs.
 * Built optionally (setup.py); REPLAYSCOPE_PURE_PYTHON=1 or no compiler: the Python core.
 *
 * Its files, one job each (this header: the RunnerState struct, the shared names and declarations):
 *   _runcore_step.c   the step: the plain route, the route run, the hand-off to Python
 *   _runcore_match.c  the fast match: the route's fit check, the full match on a miss
 *   _runcore.c        the module: configure(), the interned names, RunnerState's type, PyInit__runcore
 */
#ifndef REPLAYSCOPE_RUNCORE_H
#define REPLAYSCOPE_RUNCORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

/* Shared by this extension's files only: nothing but PyInit__runcore is exported from the built
 * module (a process that loads libraries RTLD_GLOBAL sees it alone). */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* -- what configure() gives, and the names used ------------------------------------------- */
extern PyObject *slice_rows_function;     /* routes.slice_rows: a stand-in's fresh outputs cut to the batch */
extern PyObject *make_fit_check;          /* fit_checks: a route's check made from inputs that fit; or None */
extern PyTypeObject *tensor_type;         /* torch.Tensor: an input of exactly this type has ... */
extern lenfunc tensor_length;             /* ... its batch size at dimension 0 read by its base's C length
                                           * (NULL: read from .shape), and a buffer of it is copied into
                                           * through ... */
extern PyObject *tensor_copy;             /* ... torch.Tensor.copy_ itself, not looked up by name */
extern PyObject *s_shape, *s_dtype, *s_is_cpu, *s_is_cuda, *s_get_device, *s_expected, *s_cuda_index,
                *s_count, *s_raw_bs, *s_graph_bs, *s_call, *s_copies, *s_outputs, *s_slice_rows, *s_event,
                *s_event_with, *s_every, *s_record_start, *s_stop, *s_copy, *s_fill_pad_rows, *s_stage,
                *s_reason, *s_num_tokens, *s_adapters, *s_grammar_switched, *s_python_step, *s_python_run, *s_fit_check;
/* The fields of routes.Route a step reads, and where configure() found their slots. */
enum { F_EXPECTED, F_CUDA_INDEX, F_RAW_BS, F_COUNT, F_CALL, F_EVENT, F_GRAPH_BS, F_COPIES, F_OUTPUTS, F_SLICE_ROWS,
       F_FIT_CHECK, ROUTE_FIELDS };
typedef struct { PyObject *name; Py_ssize_t offset; } RouteSlot;
extern PyTypeObject *route_type;          /* NULL: every field read by name */
extern unsigned int route_version;        /* route_type's version tag when its slots were found */
extern RouteSlot route_slots[ROUTE_FIELDS];
extern PyObject *non_blocking_kwnames, *empty_tuple, *zero, *one;

static inline int truth(PyObject *value)
{
    if (value == Py_True) return 1;
    if (value == Py_False || value == Py_None) return 0;
    return PyObject_IsTrue(value);
}

/* -- RunnerState: the fields a step reads (GraphRunner.__init__ and its setters set them) --- */
typedef struct {
    PyObject_HEAD
    PyObject *plain_routes, *first_input, *stage, *record, *clock, *buffers, *step_fn, *parity_every;
    Py_ssize_t first_dim, dirty_until;
} RunnerState;

#define FOR_EACH_FIELD(X) X(plain_routes) X(first_input) X(stage) X(record) X(clock) X(buffers) X(step_fn) \
    X(parity_every)

extern PyTypeObject RunnerStateType;

/* What the fast match read of a step's inputs: the first input and its shape (read once: for the
 * route's lookup, then for its own match; shape NULL where the lookup read the size alone), and
 * the inputs as the route expects them (route.expected and a tuple of the inputs in its order),
 * kept for the copies when the route's fit check accepted them (a C++ check: no Python of the
 * program's runs between that read and the copies, only the runner's own clock on a timed step). */
typedef struct {
    PyObject *tensor, *shape;
    PyObject *expected, *given;
} StepInputs;

/* _runcore_step.c: an Exception of a check before anything is done is the Python's to judge (0,
 * cleared); anything else goes on (-1); no error: 0. A Route's field (a new reference or NULL). */
int judged_by_python(void);
PyObject *route_field(PyObject *route, int field);

/* _runcore_match.c: the fast match. 1: the inputs fit the route; 0: the Python's to judge; -1. */
int inputs_fit(PyObject *inputs, PyObject *route, StepInputs *first);

/* _runcore_step.c: GraphRunner.step and GraphRunner._run, compiled */
PyObject *compiled_step(RunnerState *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *compiled_run(RunnerState *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
