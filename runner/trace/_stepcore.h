/* The compiled step core of `replayscope trace`: the common case of a traced step, in C.
 *
 * The reference implementation, and the fallback for everything uncommon, is Python:
 *   StepState.step_begin / step_end / step_abort  mirror  steps.py StepTracking (same names)
 *   StepWrapper                                   mirrors recipes.py step_wrapper (+ tensor_batch's cache)
 *   ReplayHook                                    mirrors hooks.py _replay
 *   TreeRun                                       mirrors graph_trees.py's run (its Python run: the fallback)
 * Anything but the common case calls the tracer's own Python methods (_start_timing, _route,
 * _decided, _stop_timing, _ensure_run, hook_error, _maybe_capture_phase): one behaviour, two
 * speeds. The tracer's state lives in StepState's fields, which Python reads and writes as
 * ordinary attributes (member descriptors): `Tracer` inherits StepState (step_core.py).
 * Built optionally (setup.py); REPLAYSCOPE_PURE_PYTHON=1 or no compiler: the Python core.
 *
 * Its files, one job each (this header: the StepState struct, the shared names and declarations):
 *   _stepcore_state.c     StepState: the tracer's step fields, timing, step_begin / step_end / step_abort
 *   _stepcore_step_end.c  step_end's body: the step's outcome routed (_route's common case), sent as an event
 *   _stepcore_wrappers.c  the replay hook, the step wrapper with tensor_batch's cache (the batch reader), and
 *                         the graph-tree call (each call of a reduce-overhead function a step, no --step)
 *   _stepcore.c           the module: configure(), the interned names, the error helpers, PyInit__stepcore
 */
#ifndef REPLAYSCOPE_STEPCORE_H
#define REPLAYSCOPE_STEPCORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <time.h>

/* Shared by this extension's files only: none of these names is exported from the built module
 * (a process that loads libraries RTLD_GLOBAL sees PyInit__stepcore alone), and calls between
 * the files stay direct, as they were within one file. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* -- what configure() gives, and the names used ------------------------------------------- */
/* steps.py's module and its `device`: the functions the Python calls (replayed, CudaClock.drop,
 * device.cuda_in_use, device.capturing) are looked up there at each call, as the Python does. */
extern PyObject *steps_module, *device_module;
extern PyObject *s_decode, *s_padded, *s_eager, *s_step, *s_mode, *s_graph_bs, *s_reason, *s_evidence,
                *s_size, *s_route, *s_start_timing, *s_stop_timing, *s_ensure_run, *s_hook_error,
                *s_capture_phase, *s_decided, *s_every, *s_record_start, *s_shape, *s_dtype, *s_step_begin,
                *s_append, *s_wrapped, *s_replayed, *s_cuda_clock_class, *s_drop, *s_cuda_in_use, *s_capturing, *s_seen,
                *s_pop, *s_graph_trees, *s_batch_index, *s_inductor_recordings, *s_inductor_calls, *s_mismatch,
                *s_inductor_call_end, *s_inductor_step, *s_inductor_call, *s_captured_by_stage, *s_captured_sizes,
                *s_compile_skip, *s_decisions;
extern PyObject *zero, *one;

/* Read on every step: inlined where they are used, as in one file. */
/* The host clock Python's time.perf_counter() reads (CLOCK_MONOTONIC on Linux), as it converts it. */
static inline double host_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (ns % 1000000000LL == 0)
        return (double)(ns / 1000000000LL);
    return (double)ns / 1e9;
}

static inline int truth(PyObject *value)
{
    if (value == Py_True) return 1;
    if (value == Py_False || value == Py_None) return 0;
    return PyObject_IsTrue(value);
}

/* An exception raised and taken out of the error indicator (normalized), and put back (_stepcore.c). */
PyObject *take_error(void);
void restore_error(PyObject *error);
void restore_program_error(PyObject *error, int failed);

/* -- StepState: the tracer's step fields (StepTracking._reset_steps and friends set them) --- */
/* The fields of _replayed's outcome for one (batch, graph size), kept where a step finds them without
 * building the dictionary's key or reading the outcome's attributes (_stepcore_step_end.c). */
#define KEPT_ROUTES 32
typedef struct {
    Py_ssize_t raw_bs, graph_size;
    PyObject *mode, *graph_bs, *reason, *evidence;      /* NULL: an empty slot */
    int eager;
} KeptRoute;

typedef struct {
    PyObject_HEAD
    PyObject *in_step, *closed, *step_stage, *step_bs, *step_tokens, *step_hint, *step_note, *step_timing,
             *step_graphs, *step_inductor, *step_captures, *emitter, *capture_phase_sent, *cuda_clock,
             *timing_counts, *replayed, *modes, *reasons;
    Py_ssize_t total_replays, step_replays_total, steps;
    PyObject *kept_routes_of;               /* the _replayed the table mirrors: another one empties it */
    KeptRoute kept_routes[KEPT_ROUTES];
} StepState;

#define FOR_EACH_FIELD(X) X(in_step) X(closed) X(step_stage) X(step_bs) X(step_tokens) X(step_hint) \
    X(step_note) X(step_timing) X(step_graphs) X(step_inductor) X(step_captures) X(emitter)         \
    X(capture_phase_sent) X(cuda_clock) X(timing_counts) X(replayed) X(modes) X(reasons)

#define SET(self, field, value) do { PyObject *_old = (self)->field; (self)->field = Py_NewRef(value); \
                                     Py_XDECREF(_old); } while (0)
/* A field Python never set reads as an AttributeError, as an attribute never set does. */
#define NEED(self, field, name) if ((self)->field == NULL) { \
        PyErr_SetString(PyExc_AttributeError, "tracer has no attribute '" name "'"); goto error; }

extern PyTypeObject StepStateType, StepWrapperType, ReplayHookType, TreeRunType;

/* _stepcore_state.c */
PyObject *call_method(StepState *self, PyObject *name, PyObject *const *args, size_t n);
int hook_failed(StepState *self, PyObject *where);
int core_begin(StepState *self, PyObject *stage, PyObject *raw_bs, PyObject *num_tokens, PyObject *hint);
int core_end(StepState *self);
void step_abort_core(StepState *self, int *failed);
void forget_routes(StepState *self);
/* _stepcore_step_end.c */
int end_body(StepState *self);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
