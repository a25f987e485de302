/* The compiled step core of `replayscope trace`: the common case of a traced step, in C.
 *
 * The reference implementation, and the fallback for everything uncommon, is Python:
 *   StepState.step_begin / step_end / step_abort  mirror  steps.py StepTracking (same names)
 *   StepWrapper                                   mirrors recipes.py step_wrapper (+ tensor_batch's cache)
 *   ReplayHook                                    mirrors hooks.py _replay
 * Anything but the common case calls the tracer's own Python methods (_start_timing, _route,
 * _decided, _stop_timing, _ensure_run, hook_error, _maybe_capture_phase): one behaviour, two
 * speeds. The tracer's state lives in StepState's fields, which Python reads and writes as
 * ordinary attributes (member descriptors): `Tracer` inherits StepState (step_core.py).
 * Built optionally (setup.py); REPLAYSCOPE_PURE_PYTHON=1 or no compiler: the Python core.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"
#include <time.h>

/* -- what configure() gives, and the names used ------------------------------------------- */
/* steps.py's module and its `device`: the functions the Python calls (replayed, CudaClock.drop,
 * device.cuda_in_use, device.capturing) are looked up there at each call, as the Python does. */
static PyObject *steps_module, *device_module;
static PyObject *s_decode, *s_padded, *s_eager, *s_step, *s_mode, *s_graph_bs, *s_reason, *s_evidence,
                *s_size, *s_route, *s_start_timing, *s_stop_timing, *s_ensure_run, *s_hook_error,
                *s_capture_phase, *s_decided, *s_every, *s_record_start, *s_shape, *s_dtype, *s_step_begin,
                *s_append, *s_wrapped, *s_replayed, *s_cuda_clock_class, *s_drop, *s_cuda_in_use, *s_capturing, *s_seen;
static PyObject *zero, *one;

/* The host clock Python's time.perf_counter() reads (CLOCK_MONOTONIC on Linux), as it converts it. */
static double host_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (ns % 1000000000LL == 0)
        return (double)(ns / 1000000000LL);
    return (double)ns / 1e9;
}

static int truth(PyObject *value)
{
    if (value == Py_True) return 1;
    if (value == Py_False || value == Py_None) return 0;
    return PyObject_IsTrue(value);
}

/* An exception raised and taken out of the error indicator (normalized), and put back. */
static PyObject *take_error(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

static void restore_error(PyObject *error)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(error);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(error)), error, PyException_GetTraceback(error));
#endif
}

/* -- StepState: the tracer's step fields (StepTracking._reset_steps and friends set them) --- */
typedef struct {
    PyObject_HEAD
    PyObject *in_step, *closed, *step_stage, *step_bs, *step_tokens, *step_hint, *step_note, *step_timing,
             *step_graphs, *step_inductor, *step_captures, *emitter, *capture_phase_sent, *cuda_clock,
             *timing_counts, *replayed, *modes, *reasons;
    Py_ssize_t total_replays, step_replays_total, steps;
} StepState;

#define FOR_EACH_FIELD(X) X(in_step) X(closed) X(step_stage) X(step_bs) X(step_tokens) X(step_hint) \
    X(step_note) X(step_timing) X(step_graphs) X(step_inductor) X(step_captures) X(emitter)         \
    X(capture_phase_sent) X(cuda_clock) X(timing_counts) X(replayed) X(modes) X(reasons)

#define SET(self, field, value) do { PyObject *_old = (self)->field; (self)->field = Py_NewRef(value); \
                                     Py_XDECREF(_old); } while (0)
/* A field Python never set reads as an AttributeError, as an attribute never set does. */
#define NEED(self, field, name) if ((self)->field == NULL) { \
        PyErr_SetString(PyExc_AttributeError, "tracer has no attribute '" name "'"); goto error; }

static PyTypeObject StepStateType;

static int step_state_traverse(StepState *self, visitproc visit, void *arg)
{
#define VISIT(f) Py_VISIT(self->f);
    FOR_EACH_FIELD(VISIT)
    return 0;
}

static int step_state_clear(StepState *self)
{
#define CLEAR(f) Py_CLEAR(self->f);
    FOR_EACH_FIELD(CLEAR)
    return 0;
}

static void step_state_dealloc(StepState *self)
{
    PyObject_GC_UnTrack(self);
    step_state_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The tracer's Python method `name` called with `n` arguments. */
static PyObject *call_method(StepState *self, PyObject *name, PyObject *const *args, size_t n)
{
    PyObject *stack[6] = {(PyObject *)self};
    for (size_t i = 0; i < n; i++) stack[i + 1] = args[i];
    return PyObject_VectorcallMethod(name, stack, (n + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* An Exception in the tracer's own work: the step ends, the run gets a warning (hook_error);
 * anything else (KeyboardInterrupt, SystemExit) goes on to the program. 0: taken; -1: not. */
static int step_failed(StepState *self)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyObject *error = take_error();
    SET(self, in_step, Py_False);
    PyObject *args[2] = {s_step, error};
    PyObject *done = call_method(self, s_hook_error, args, 2);
    Py_DECREF(error);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* StepTracking._start_timing: the host clock before CUDA is in use; then CUDA events on a sample
 * of steps, counted in the key's cell (a decode batch's kept in _timing_counts, another stage's
 * the clock's own); a key's first step, and a sampled step's record_start, in Python. */
static PyObject *start_timing(StepState *self, PyObject *stage, PyObject *raw_bs)
{
    PyObject *args[2] = {stage, raw_bs};
    if (self->cuda_clock == NULL || self->cuda_clock == Py_None) {
        PyObject *in_use = PyObject_CallMethodNoArgs(device_module, s_cuda_in_use);
        if (in_use == NULL) return NULL;
        int used = truth(in_use);
        Py_DECREF(in_use);
        if (used < 0) return NULL;
        if (!used) return PyFloat_FromDouble(host_now());       /* the host clock, read here */
        return call_method(self, s_start_timing, args, 2);       /* makes the CUDA clock */
    }
    int decode = PyObject_RichCompareBool(stage, s_decode, Py_EQ);
    if (decode < 0) return NULL;
    PyObject *count = NULL;       /* the key's cell, [steps counted]: kept here for a decode batch */
    if (decode && self->timing_counts != NULL && PyDict_CheckExact(self->timing_counts)) {
        count = Py_XNewRef(PyDict_GetItemWithError(self->timing_counts, raw_bs));
    } else if (!decode) {         /* clock.counter((stage, raw_bs)), when the clock has the cell */
        PyObject *seen_by_key = PyObject_GetAttr(self->cuda_clock, s_seen);
        PyObject *key = seen_by_key == NULL ? NULL : PyTuple_Pack(2, stage, raw_bs);
        if (key != NULL && PyDict_CheckExact(seen_by_key))
            count = Py_XNewRef(PyDict_GetItemWithError(seen_by_key, key));
        Py_XDECREF(seen_by_key);
        Py_XDECREF(key);
        if (count == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
    }
    if (count == NULL && PyErr_Occurred()) return NULL;
    if (count == NULL || !PyList_CheckExact(count) || PyList_GET_SIZE(count) < 1) {
        Py_XDECREF(count);
        return call_method(self, s_start_timing, args, 2);       /* the first step of its key */
    }
    PyObject *seen = Py_NewRef(PyList_GET_ITEM(count, 0));
    PyObject *next = PyNumber_Add(seen, one);
    if (next == NULL) { Py_DECREF(seen); Py_DECREF(count); return NULL; }
    PyList_SetItem(count, 0, next);
    Py_DECREF(count);
    PyObject *every = PyObject_GetAttr(self->cuda_clock, s_every);
    PyObject *rest = every == NULL ? NULL : PyNumber_Remainder(seen, every);
    Py_DECREF(seen);
    Py_XDECREF(every);
    if (rest == NULL) return NULL;
    int skip = truth(rest);
    Py_DECREF(rest);
    if (skip < 0) return NULL;
    if (skip) Py_RETURN_NONE;
    PyObject *capturing = PyObject_CallMethodNoArgs(device_module, s_capturing);   /* never record while capturing */
    if (capturing == NULL) return NULL;
    skip = truth(capturing);
    Py_DECREF(capturing);
    if (skip < 0) return NULL;
    if (skip) Py_RETURN_NONE;
    return PyObject_CallMethodNoArgs(self->cuda_clock, s_record_start);
}

/* StepTracking.step_begin. 1: a step started; 0: not (one runs already, or the tracer failed);
 * -1: an error for the program. */
static int core_begin(StepState *self, PyObject *stage, PyObject *raw_bs, PyObject *num_tokens, PyObject *hint)
{
    NEED(self, in_step, "in_step") NEED(self, closed, "closed")
    int busy = truth(self->in_step);
    if (busy == 0) busy = truth(self->closed);
    if (busy) return busy < 0 ? -1 : 0;
    SET(self, in_step, Py_True);
    SET(self, step_stage, stage);
    SET(self, step_bs, raw_bs);
    if (num_tokens != Py_None) {
        SET(self, step_tokens, num_tokens);
    } else {
        int some = truth(raw_bs);
        if (some < 0) goto error;
        SET(self, step_tokens, some ? raw_bs : zero);
    }
    SET(self, step_hint, hint);
    SET(self, step_note, Py_None);
    SET(self, step_captures, zero);
    SET(self, step_inductor, Py_None);
    PyObject *timing = start_timing(self, stage, raw_bs);
    if (timing == NULL) return step_failed(self) < 0 ? -1 : 0;
    Py_XSETREF(self->step_timing, timing);
    return 1;
error:
    return -1;
}

static void step_abort_core(StepState *self, int *failed)
{
    /* StepTracking.step_abort: the step raised; its events go back to the pool, it is not recorded. */
    *failed = 0;
    if (self->in_step == NULL) return;
    int running = truth(self->in_step);
    if (running <= 0) { *failed = running < 0; return; }
    SET(self, in_step, Py_False);
    PyObject *timing = self->step_timing;
    if (timing != NULL && timing != Py_None && !PyFloat_CheckExact(timing)) {
        PyObject *clock = PyObject_GetAttr(steps_module, s_cuda_clock_class);   /* CudaClock.drop(timing) */
        Py_INCREF(timing);
        PyObject *done = clock == NULL ? NULL : PyObject_CallMethodOneArg(clock, s_drop, timing);
        Py_XDECREF(clock);
        Py_DECREF(timing);
        if (done == NULL) { *failed = 1; return; }
        Py_DECREF(done);
    }
    SET(self, step_timing, Py_None);
    if (self->step_graphs != NULL && PyList_CheckExact(self->step_graphs)) {
        self->step_replays_total += PyList_GET_SIZE(self->step_graphs);
        if (PyList_SetSlice(self->step_graphs, 0, PY_SSIZE_T_MAX, NULL) < 0) *failed = 1;
    }
}

/* StepTracking._route's common case: every graph replayed has a size, no Inductor word; the
 * outcome per (batch, graph size) from _replayed, made by causes.replayed on a miss; a step that
 * replayed nothing asks _decided at once, as _route does. Anything else is _route itself.
 * Sets route_out = (raw_bs, mode, graph_bs, reason, evidence), new references. */
static int route_held(StepState *self, PyObject *raw_bs, PyObject *graphs, PyObject *replayed, PyObject *route_out[5])
{
    PyObject *outcome = NULL, *key = NULL, *largest = NULL;
    Py_ssize_t replays = PyList_GET_SIZE(graphs), max_bs = 0;
    if (replays == 0 && PyLong_CheckExact(raw_bs)) {
        /* no replay: _route would only ask _decided, and so does this */
        PyObject *args[3] = {raw_bs, zero, zero};
        outcome = call_method(self, s_decided, args, 3);
        if (outcome == NULL) return -1;
        largest = NULL;
        goto decided;
    }
    int common = replays > 0 && self->step_inductor == Py_None && PyLong_CheckExact(raw_bs)
                 && replayed != NULL && PyDict_CheckExact(replayed);
    for (Py_ssize_t i = 0; common && i < replays; i++) {
        PyObject *size = PyObject_GetAttr(PyList_GET_ITEM(graphs, i), s_size);
        if (size == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
            common = 0;                   /* a graph of unknown size: _route binds it */
            break;
        }
        Py_ssize_t value = PyLong_CheckExact(size) ? PyLong_AsSsize_t(size) : 0;
        Py_DECREF(size);
        if (value == -1 && PyErr_Occurred()) { PyErr_Clear(); value = 0; }
        if (value > max_bs) max_bs = value;
        else if (value == 0) common = 0;
    }
    if (!common) {
        PyObject *args[2] = {raw_bs, graphs};
        PyObject *routed = call_method(self, s_route, args, 2);
        if (routed == NULL) return -1;
        if (!PyTuple_Check(routed) || PyTuple_GET_SIZE(routed) != 5) {
            Py_DECREF(routed);
            PyErr_SetString(PyExc_TypeError, "_route must return (raw_bs, mode, graph_bs, reason, evidence)");
            return -1;
        }
        for (int i = 0; i < 5; i++) route_out[i] = Py_NewRef(PyTuple_GET_ITEM(routed, i));
        Py_DECREF(routed);
        return 0;
    }
    self->step_replays_total += replays;
    if (PyList_SetSlice(graphs, 0, PY_SSIZE_T_MAX, NULL) < 0) return -1;
    largest = PyLong_FromSsize_t(max_bs);
    if (largest == NULL) return -1;
    key = PyTuple_Pack(2, raw_bs, largest);
    if (key == NULL) goto error;
    outcome = Py_XNewRef(PyDict_GetItemWithError(replayed, key));
    if (outcome == NULL) {
        if (PyErr_Occurred()) goto error;
        PyObject *args[3] = {steps_module, raw_bs, largest};
        outcome = PyObject_VectorcallMethod(s_replayed, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (outcome == NULL || PyDict_SetItem(replayed, key, outcome) < 0) goto error;
    }
    if (outcome == Py_None) {            /* a graph smaller than the batch: decide reads it */
        Py_DECREF(outcome);
        PyObject *count = PyLong_FromSsize_t(replays);
        if (count == NULL) { outcome = NULL; goto error; }
        PyObject *args[3] = {raw_bs, count, largest};
        outcome = call_method(self, s_decided, args, 3);
        Py_DECREF(count);
        if (outcome == NULL) goto error;
    }
    Py_CLEAR(key);
    Py_CLEAR(largest);
decided:;
    PyObject *mode = PyObject_GetAttr(outcome, s_mode);
    PyObject *graph_bs = mode == NULL ? NULL : PyObject_GetAttr(outcome, s_graph_bs);
    PyObject *reason = graph_bs == NULL ? NULL : PyObject_GetAttr(outcome, s_reason);
    PyObject *evidence = reason == NULL ? NULL : PyObject_GetAttr(outcome, s_evidence);
    Py_CLEAR(outcome);
    int eager = evidence == NULL ? -1 : PyObject_RichCompareBool(mode, s_eager, Py_EQ);
    if (eager < 0) { Py_XDECREF(mode); Py_XDECREF(graph_bs); Py_XDECREF(reason); Py_XDECREF(evidence); return -1; }
    if (evidence == Py_None && !eager)
        Py_SETREF(evidence, Py_NewRef(self->step_note ? self->step_note : Py_None));
    route_out[0] = Py_NewRef(raw_bs);
    route_out[1] = mode; route_out[2] = graph_bs; route_out[3] = reason; route_out[4] = evidence;
    return 0;
error:
    Py_XDECREF(key);
    Py_XDECREF(largest);
    Py_XDECREF(outcome);
    return -1;
}

/* route_held with what it reads held: the Python it calls may set the tracer's fields anew. */
static int route(StepState *self, PyObject *route_out[5])
{
    PyObject *raw_bs = Py_NewRef(self->step_bs), *graphs = Py_NewRef(self->step_graphs);
    PyObject *replayed = Py_XNewRef(self->replayed);
    int done = route_held(self, raw_bs, graphs, replayed, route_out);
    Py_DECREF(raw_bs);
    Py_DECREF(graphs);
    Py_XDECREF(replayed);
    return done;
}

/* counts[name] += 1 */
static int count_in(PyObject *counts, PyObject *name)
{
    PyObject *seen = PyDict_GetItemWithError(counts, name);
    if (seen == NULL && PyErr_Occurred()) return -1;
    PyObject *now = PyNumber_Add(seen ? seen : zero, one);
    if (now == NULL) return -1;
    int failed = PyDict_SetItem(counts, name, now);
    Py_DECREF(now);
    return failed;
}

/* StepTracking.step_end's body: the step's outcome routed and sent as a `step` event. */
static int end_body(StepState *self)
{
    PyObject *timing = NULL, *routed[5] = {NULL}, *padded = NULL, *emitter = NULL, *result = NULL, *tokens = NULL,
             *stage = NULL;
    int failed = -1;
    NEED(self, step_timing, "step_timing") NEED(self, step_graphs, "step_graphs")
    NEED(self, step_bs, "step_bs") NEED(self, step_tokens, "step_tokens") NEED(self, step_stage, "step_stage")
    NEED(self, step_inductor, "step_inductor") NEED(self, modes, "_modes") NEED(self, reasons, "_reasons")
    NEED(self, emitter, "emitter") NEED(self, capture_phase_sent, "_capture_phase_sent")
    timing = Py_NewRef(self->step_timing);
    if (timing != Py_None) {
        if (PyFloat_CheckExact(timing))
            Py_SETREF(timing, PyFloat_FromDouble(host_now() - PyFloat_AS_DOUBLE(timing)));
        else
            Py_SETREF(timing, call_method(self, s_stop_timing, &timing, 1));
        if (timing == NULL) goto error;
    }
    SET(self, in_step, Py_False);
    SET(self, step_timing, Py_None);
    if (!PyList_CheckExact(self->step_graphs)) {
        PyErr_SetString(PyExc_TypeError, "step_graphs must be a list");
        goto error;
    }
    if (route(self, routed) < 0) goto error;
    PyObject *raw_bs = routed[0], *mode = routed[1], *graph_bs = routed[2], *reason = routed[3];
    tokens = Py_NewRef(self->step_tokens);
    int is_padded = PyObject_RichCompareBool(mode, s_padded, Py_EQ);
    if (is_padded < 0) goto error;
    if (is_padded) {         /* (graph_bs - raw_bs) * max(tokens // raw_bs, 1) */
        PyObject *rows = PyNumber_Subtract(graph_bs, raw_bs);
        PyObject *per_row = rows == NULL ? NULL : PyNumber_FloorDivide(tokens, raw_bs);
        int below = per_row == NULL ? -1 : PyObject_RichCompareBool(one, per_row, Py_GT);
        padded = below < 0 ? NULL : PyNumber_Multiply(rows, below ? one : per_row);
        Py_XDECREF(rows);
        Py_XDECREF(per_row);
        if (padded == NULL) goto error;
    } else {
        padded = Py_NewRef(zero);
    }
    emitter = self->emitter != Py_None ? Py_NewRef(self->emitter) : call_method(self, s_ensure_run, NULL, 0);
    if (emitter == NULL) goto error;
    self->steps += 1;
    if (!PyDict_CheckExact(self->modes) || !PyDict_CheckExact(self->reasons)) {
        PyErr_SetString(PyExc_TypeError, "_modes and _reasons must be dicts");
        goto error;
    }
    if (count_in(self->modes, mode) < 0) goto error;
    if (reason != Py_None && count_in(self->reasons, reason) < 0) goto error;
    if (emitter != Py_None) {
        stage = Py_NewRef(self->step_stage);
        PyObject *args[10] = {emitter, stage, mode, raw_bs, graph_bs, tokens, padded, reason,
                              timing, routed[4]};
        result = PyObject_VectorcallMethod(s_step, args, 10 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (result == NULL) goto error;
        Py_CLEAR(result);
    }
    int sent = truth(self->capture_phase_sent);
    if (sent < 0) goto error;
    if (!sent) {
        result = call_method(self, s_capture_phase, NULL, 0);
        if (result == NULL) goto error;
        Py_CLEAR(result);
    }
    failed = 0;
error:
    Py_XDECREF(timing);
    for (int i = 0; i < 5; i++) Py_XDECREF(routed[i]);
    Py_XDECREF(padded);
    Py_XDECREF(emitter);
    Py_XDECREF(tokens);
    Py_XDECREF(stage);
    return failed;
}

/* StepTracking.step_end. 0: done (or the tracer's failure taken); -1: an error for the program. */
static int core_end(StepState *self)
{
    if (self->in_step == NULL) return 0;
    int running = truth(self->in_step);
    if (running <= 0) return running;
    if (end_body(self) < 0) return step_failed(self);
    return 0;
}

static PyObject *step_begin_method(StepState *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *names[] = {"stage", "raw_bs", "num_tokens", "hint"};
    PyObject *given[4] = {NULL, NULL, Py_None, Py_None};
    if (nargs > 4) return PyErr_Format(PyExc_TypeError, "step_begin takes at most 4 arguments (%zd given)", nargs);
    for (Py_ssize_t i = 0; i < nargs; i++) given[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < 4 && PyUnicode_CompareWithASCIIString(name, names[i]) != 0) i++;
        if (i == 4) return PyErr_Format(PyExc_TypeError, "step_begin got an unexpected keyword argument '%U'", name);
        if (i < nargs) return PyErr_Format(PyExc_TypeError, "step_begin got multiple values for argument '%s'", names[i]);
        given[i] = args[nargs + k];
    }
    if (given[0] == NULL || given[1] == NULL)
        return PyErr_Format(PyExc_TypeError, "step_begin missing required argument '%s'", names[given[0] ? 1 : 0]);
    int started = core_begin(self, given[0], given[1], given[2], given[3]);
    if (started < 0) return NULL;
    return PyBool_FromLong(started);
}

static PyObject *step_end_method(StepState *self, PyObject *unused)
{
    if (core_end(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *step_abort_method(StepState *self, PyObject *unused)
{
    int failed;
    step_abort_core(self, &failed);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef step_state_methods[] = {
    {"step_begin", (PyCFunction)(void (*)(void))step_begin_method, METH_FASTCALL | METH_KEYWORDS,
     "step_begin(stage, raw_bs, num_tokens=None, hint=None): a step starts; False when one already runs."},
    {"step_end", (PyCFunction)step_end_method, METH_NOARGS, "The step's outcome routed and sent as a step event."},
    {"step_abort", (PyCFunction)step_abort_method, METH_NOARGS, "The step raised: it is not recorded."},
    {NULL}
};

#define OBJ(name, field) {name, T_OBJECT_EX, offsetof(StepState, field), 0, NULL},
static PyMemberDef step_state_members[] = {
    OBJ("in_step", in_step) OBJ("closed", closed) OBJ("step_stage", step_stage) OBJ("step_bs", step_bs)
    OBJ("step_tokens", step_tokens) OBJ("step_hint", step_hint) OBJ("step_note", step_note)
    OBJ("step_timing", step_timing) OBJ("step_graphs", step_graphs) OBJ("step_inductor", step_inductor)
    OBJ("step_captures", step_captures) OBJ("emitter", emitter) OBJ("_capture_phase_sent", capture_phase_sent)
    OBJ("_cuda_clock", cuda_clock) OBJ("_timing_counts", timing_counts) OBJ("_replayed", replayed)
    OBJ("_modes", modes) OBJ("_reasons", reasons)
    {"total_replays", T_PYSSIZET, offsetof(StepState, total_replays), 0, NULL},
    {"step_replays_total", T_PYSSIZET, offsetof(StepState, step_replays_total), 0, NULL},
    {"steps", T_PYSSIZET, offsetof(StepState, steps), 0, NULL},
    {NULL}
};

static PyTypeObject StepStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replayscope.runner.trace._stepcore.StepState",
    .tp_doc = "The tracer's step state and its compiled step_begin / step_end / step_abort.",
    .tp_basicsize = sizeof(StepState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)step_state_dealloc,
    .tp_traverse = (traverseproc)step_state_traverse,
    .tp_clear = (inquiry)step_state_clear,
    .tp_methods = step_state_methods,
    .tp_members = step_state_members,
};

/* -- the wrappers: callables that bind as methods, with a __dict__ (functools.update_wrapper) -- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    StepState *tracer;
    PyObject *original;
    PyObject *batch_of, *recipe, *recipe_failed;     /* StepWrapper only */
    PyObject *batches, *tensor_type_of, *tensor_type; /* StepWrapper with tensor_batch's cache only */
} Wrapper;

static int wrapper_traverse(Wrapper *self, visitproc visit, void *arg)
{
    Py_VISIT(self->dict); Py_VISIT(self->tracer); Py_VISIT(self->original); Py_VISIT(self->batch_of);
    Py_VISIT(self->recipe); Py_VISIT(self->recipe_failed); Py_VISIT(self->batches);
    Py_VISIT(self->tensor_type_of); Py_VISIT(self->tensor_type);
    return 0;
}

static int wrapper_clear(Wrapper *self)
{
    Py_CLEAR(self->dict); Py_CLEAR(self->tracer); Py_CLEAR(self->original); Py_CLEAR(self->batch_of);
    Py_CLEAR(self->recipe); Py_CLEAR(self->recipe_failed); Py_CLEAR(self->batches);
    Py_CLEAR(self->tensor_type_of); Py_CLEAR(self->tensor_type);
    return 0;
}

static void wrapper_dealloc(Wrapper *self)
{
    PyObject_GC_UnTrack(self);
    wrapper_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *wrapper_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);       /* as a function set on a class binds */
}

static PyObject *call_original(Wrapper *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
}

/* hooks._replay: the replay counted, and inside a step the graph kept for the step's end. */
static PyObject *replay_call(Wrapper *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    StepState *tracer = self->tracer;
    tracer->total_replays += 1;
    if (tracer->in_step != NULL) {
        int running = truth(tracer->in_step);
        if (running < 0) return NULL;
        if (running) {
            if (PyVectorcall_NARGS(nargsf) < 1)
                return PyErr_Format(PyExc_TypeError, "replay() missing 1 required positional argument: 'self'");
            PyObject *graphs = tracer->step_graphs;
            if (graphs != NULL && PyList_CheckExact(graphs)) {
                if (PyList_Append(graphs, args[0]) < 0) return NULL;
            } else {
                if (graphs == NULL) return PyErr_Format(PyExc_AttributeError, "tracer has no attribute 'step_graphs'");
                PyObject *done = PyObject_CallMethodOneArg(graphs, s_append, args[0]);
                if (done == NULL) return NULL;
                Py_DECREF(done);
            }
        }
    }
    return call_original(self, args, nargsf, kwnames);
}

/* tensor_batch's common case: the first positional tensor's (shape, dtype) already in its cache.
 * NULL (no error set): not known here; the Python batch_of decides. */
static PyObject *cached_batch(Wrapper *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->batches == NULL) return NULL;
    if (self->tensor_type == NULL) {
        self->tensor_type = PyObject_CallNoArgs(self->tensor_type_of);
        if (self->tensor_type == NULL) { PyErr_Clear(); return NULL; }
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        int is_tensor = PyObject_IsInstance(args[i], self->tensor_type);
        if (is_tensor < 0) { PyErr_Clear(); return NULL; }
        if (!is_tensor) continue;
        PyObject *shape = PyObject_GetAttr(args[i], s_shape);
        PyObject *dtype = shape == NULL ? NULL : PyObject_GetAttr(args[i], s_dtype);
        PyObject *key = dtype == NULL ? NULL : PyTuple_Pack(2, shape, dtype);
        Py_XDECREF(shape);
        Py_XDECREF(dtype);
        PyObject *batch = key == NULL ? NULL : PyDict_GetItemWithError(self->batches, key);
        Py_XDECREF(key);
        if (batch == NULL) PyErr_Clear();
        return Py_XNewRef(batch);
    }
    return NULL;
}

/* The Python batch_of(args, kwargs); an Exception in it is the recipe's failure (a warning), no step. */
static PyObject *python_batch(Wrapper *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *tuple = PyTuple_New(nargs), *kwargs = PyDict_New(), *batch = NULL;
    if (tuple == NULL || kwargs == NULL) goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++)
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, k), args[nargs + k]) < 0) goto done;
    batch = PyObject_CallFunctionObjArgs(self->batch_of, tuple, kwargs, NULL);
    if (batch == NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
        PyObject *error = take_error();
        PyObject *warned = PyObject_CallFunctionObjArgs(self->recipe_failed, self->tracer, self->recipe, error, NULL);
        Py_DECREF(error);
        if (warned != NULL) { Py_DECREF(warned); batch = Py_NewRef(Py_None); }
    }
done:
    Py_XDECREF(tuple);
    Py_XDECREF(kwargs);
    return batch;
}

/* recipes.step_wrapper: each outermost call of the step function recorded as one step. */
static PyObject *step_call(Wrapper *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    StepState *tracer = self->tracer;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (tracer->in_step == NULL) return PyErr_Format(PyExc_AttributeError, "tracer has no attribute 'in_step'");
    int running = truth(tracer->in_step);
    if (running < 0) return NULL;
    if (running) return call_original(self, args, nargsf, kwnames);      /* part of the step running */
    PyObject *batch = cached_batch(self, args, nargs);
    if (batch == NULL && (batch = python_batch(self, args, nargs, kwnames)) == NULL) return NULL;
    int started;
    Py_ssize_t size = PyTuple_Check(batch) ? PyTuple_GET_SIZE(batch) : -1;
    if (batch == Py_None) {
        started = 0;
    } else if (size >= 2 && size <= 4) {
        started = core_begin(tracer, PyTuple_GET_ITEM(batch, 0), PyTuple_GET_ITEM(batch, 1),
                             size > 2 ? PyTuple_GET_ITEM(batch, 2) : Py_None,
                             size > 3 ? PyTuple_GET_ITEM(batch, 3) : Py_None);
    } else {                              /* tracer.step_begin(*batch), whatever it raises */
        PyObject *begin = PyObject_GetAttr((PyObject *)tracer, s_step_begin);
        PyObject *items = begin == NULL ? NULL : PySequence_Tuple(batch);
        PyObject *result = items == NULL ? NULL : PyObject_Call(begin, items, NULL);
        Py_XDECREF(begin);
        Py_XDECREF(items);
        started = result == NULL ? -1 : truth(result);
        Py_XDECREF(result);
    }
    Py_DECREF(batch);
    if (started < 0) return NULL;
    if (!started) return call_original(self, args, nargsf, kwnames);
    PyObject *result = call_original(self, args, nargsf, kwnames);
    if (result == NULL) {                 /* the program's error: the step is not recorded */
        PyObject *error = take_error();
        int failed;
        step_abort_core(tracer, &failed);
        if (failed) {                     /* raised while handling the program's error */
            PyObject *other = take_error();
            PyException_SetContext(other, error);
            restore_error(other);
        } else {
            restore_error(error);
        }
        return NULL;
    }
    if (core_end(tracer) < 0) { Py_DECREF(result); return NULL; }
    return result;
}

static PyObject *wrapper_make(PyTypeObject *type, StepState *tracer, PyObject *original, vectorcallfunc call)
{
    Wrapper *self = PyObject_GC_New(Wrapper, type);
    if (self == NULL) return NULL;
    self->vectorcall = call;
    self->dict = PyDict_New();
    self->tracer = (StepState *)Py_NewRef(tracer);
    self->original = Py_NewRef(original);
    self->batch_of = self->recipe = self->recipe_failed = self->batches = NULL;
    self->tensor_type_of = self->tensor_type = NULL;
    PyObject_GC_Track(self);
    if (self->dict == NULL || PyDict_SetItem(self->dict, s_wrapped, original) < 0) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}

static PyTypeObject StepWrapperType, ReplayHookType;

static PyObject *step_wrapper_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"tracer", "original", "batch_of", "recipe", "recipe_failed", "batches",
                            "tensor_type", NULL};
    PyObject *tracer, *original, *batch_of, *recipe, *recipe_failed, *batches = Py_None, *tensor_type = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOOO|OO:StepWrapper", names, &StepStateType, &tracer,
                                     &original, &batch_of, &recipe, &recipe_failed, &batches, &tensor_type))
        return NULL;
    if (batches != Py_None && !PyDict_CheckExact(batches))
        return PyErr_Format(PyExc_TypeError, "StepWrapper: batches must be a dict or None");
    Wrapper *self = (Wrapper *)wrapper_make(type, (StepState *)tracer, original, (vectorcallfunc)step_call);
    if (self == NULL) return NULL;
    self->batch_of = Py_NewRef(batch_of);
    self->recipe = Py_NewRef(recipe);
    self->recipe_failed = Py_NewRef(recipe_failed);
    if (batches != Py_None && tensor_type != Py_None) {
        self->batches = Py_NewRef(batches);
        self->tensor_type_of = Py_NewRef(tensor_type);
    }
    return (PyObject *)self;
}

static PyObject *replay_hook_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"tracer", "original", NULL};
    PyObject *tracer, *original;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O:ReplayHook", names, &StepStateType, &tracer, &original))
        return NULL;
    return wrapper_make(type, (StepState *)tracer, original, (vectorcallfunc)replay_call);
}

#define WRAPPER_TYPE(NAME, PYNAME, DOC, NEW) static PyTypeObject NAME = {            \
    PyVarObject_HEAD_INIT(NULL, 0)                                                   \
    .tp_name = "replayscope.runner.trace._stepcore." PYNAME,                         \
    .tp_doc = DOC,                                                                   \
    .tp_basicsize = sizeof(Wrapper),                                                 \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL  \
                | Py_TPFLAGS_METHOD_DESCRIPTOR, /* a method call passes self first, unbound */ \
    .tp_new = NEW,                                                                   \
    .tp_dealloc = (destructor)wrapper_dealloc,                                       \
    .tp_traverse = (traverseproc)wrapper_traverse,                                   \
    .tp_clear = (inquiry)wrapper_clear,                                              \
    .tp_call = PyVectorcall_Call,                                                    \
    .tp_vectorcall_offset = offsetof(Wrapper, vectorcall),                           \
    .tp_dictoffset = offsetof(Wrapper, dict),                                        \
    .tp_descr_get = wrapper_get,                                                     \
    .tp_getattro = PyObject_GenericGetAttr,                                          \
    .tp_setattro = PyObject_GenericSetAttr,                                          \
};
WRAPPER_TYPE(StepWrapperType, "StepWrapper",
             "StepWrapper(tracer, original, batch_of, recipe, recipe_failed, batches=None, tensor_type=None): "
             "recipes.step_wrapper, compiled.", step_wrapper_new)
WRAPPER_TYPE(ReplayHookType, "ReplayHook", "ReplayHook(tracer, original): hooks._replay, compiled.", replay_hook_new)

/* -- the module --------------------------------------------------------------------------- */
static PyObject *configure(PyObject *module, PyObject *args)
{
    PyObject *steps, *device;
    if (!PyArg_ParseTuple(args, "OO:configure", &steps, &device)) return NULL;
    Py_XSETREF(steps_module, Py_NewRef(steps));
    Py_XSETREF(device_module, Py_NewRef(device));
    Py_RETURN_NONE;
}

static PyObject *perf_counter(PyObject *module, PyObject *unused)
{
    return PyFloat_FromDouble(host_now());
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(steps, device): the modules whose functions the core calls (steps.replayed, steps.CudaClock.drop, "
     "device.cuda_in_use, device.capturing)."},
    {"perf_counter", perf_counter, METH_NOARGS, "The host clock the core reads (time.perf_counter's)."},
    {NULL}
};

static struct PyModuleDef stepcore_module = {
    PyModuleDef_HEAD_INIT, "_stepcore", "The compiled step core of replayscope trace (see _stepcore.c).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__stepcore(void)
{
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_decode, "decode") INTERN(s_padded, "padded") INTERN(s_eager, "eager") INTERN(s_step, "step")
    INTERN(s_mode, "mode") INTERN(s_graph_bs, "graph_bs") INTERN(s_reason, "reason") INTERN(s_evidence, "evidence")
    INTERN(s_size, "_replayscope_bs") INTERN(s_route, "_route") INTERN(s_start_timing, "_start_timing")
    INTERN(s_stop_timing, "_stop_timing") INTERN(s_ensure_run, "_ensure_run") INTERN(s_hook_error, "hook_error")
    INTERN(s_capture_phase, "_maybe_capture_phase") INTERN(s_decided, "_decided") INTERN(s_every, "every")
    INTERN(s_record_start, "record_start") INTERN(s_shape, "shape") INTERN(s_dtype, "dtype")
    INTERN(s_step_begin, "step_begin") INTERN(s_append, "append") INTERN(s_wrapped, "__wrapped__")
    INTERN(s_replayed, "replayed") INTERN(s_cuda_clock_class, "CudaClock") INTERN(s_drop, "drop")
    INTERN(s_cuda_in_use, "cuda_in_use") INTERN(s_capturing, "capturing") INTERN(s_seen, "_seen")
    if ((zero = PyLong_FromLong(0)) == NULL || (one = PyLong_FromLong(1)) == NULL) return NULL;
    if (PyType_Ready(&StepStateType) < 0 || PyType_Ready(&StepWrapperType) < 0 || PyType_Ready(&ReplayHookType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&stepcore_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "StepState", (PyObject *)&StepStateType) < 0
        || PyModule_AddObjectRef(module, "StepWrapper", (PyObject *)&StepWrapperType) < 0
        || PyModule_AddObjectRef(module, "ReplayHook", (PyObject *)&ReplayHookType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
