/* StepState: the tracer's step fields (member descriptors Python reads and writes), its timing,
 * and the compiled step_begin / step_end / step_abort (mirroring steps.py StepTracking). */
#include "_stepcore.h"
#include "structmember.h"

static int step_state_traverse(StepState *self, visitproc visit, void *arg)
{
#define VISIT(f) Py_VISIT(self->f);
    FOR_EACH_FIELD(VISIT)
    Py_VISIT(self->kept_routes_of);
    return 0;
}

/* The kept routes emptied (their outcome's fields let go). */
void forget_routes(StepState *self)
{
    for (int i = 0; i < KEPT_ROUTES; i++) {
        KeptRoute *kept = &self->kept_routes[i];
        Py_CLEAR(kept->mode); Py_CLEAR(kept->graph_bs); Py_CLEAR(kept->reason); Py_CLEAR(kept->evidence);
    }
    Py_CLEAR(self->kept_routes_of);
}

static int step_state_clear(StepState *self)
{
#define CLEAR(f) Py_CLEAR(self->f);
    FOR_EACH_FIELD(CLEAR)
    forget_routes(self);
    return 0;
}

static void step_state_dealloc(StepState *self)
{
    PyObject_GC_UnTrack(self);
    step_state_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The tracer's Python method `name` called with `n` arguments. */
PyObject *call_method(StepState *self, PyObject *name, PyObject *const *args, size_t n)
{
    PyObject *stack[6] = {(PyObject *)self};
    for (size_t i = 0; i < n; i++) stack[i + 1] = args[i];
    return PyObject_VectorcallMethod(name, stack, (n + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* An Exception of the tracer's own (the error set) in the hook `where`: the run gets a warning
 * (hook_error), the program goes on. 0: taken; -1: not an Exception (KeyboardInterrupt, SystemExit:
 * they go on to the program), or hook_error raised. */
int hook_failed(StepState *self, PyObject *where)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyObject *error = take_error();
    PyObject *args[2] = {where, error};
    PyObject *done = call_method(self, s_hook_error, args, 2);
    Py_DECREF(error);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* An Exception in the tracer's own work on a step: the step ends, the run gets a warning. */
static int step_failed(StepState *self)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    SET(self, in_step, Py_False);
    return hook_failed(self, s_step);
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
int core_begin(StepState *self, PyObject *stage, PyObject *raw_bs, PyObject *num_tokens, PyObject *hint)
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

void step_abort_core(StepState *self, int *failed)
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

/* StepTracking.step_end. 0: done (or the tracer's failure taken); -1: an error for the program. */
int core_end(StepState *self)
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

/* A StepState before configure() would call into modules it does not have yet: refused, by name. */
static PyObject *step_state_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (steps_module == NULL || device_module == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_stepcore.configure(steps, device) must be called before a "
                                            "StepState is made (replayscope.runner.trace.step_core.load does)");
        return NULL;
    }
    return PyType_GenericNew(type, args, kwds);
}

PyTypeObject StepStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replayscope.runner.trace._stepcore.StepState",
    .tp_doc = "The tracer's step state and its compiled step_begin / step_end / step_abort.",
    .tp_basicsize = sizeof(StepState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = step_state_new,
    .tp_dealloc = (destructor)step_state_dealloc,
    .tp_traverse = (traverseproc)step_state_traverse,
    .tp_clear = (inquiry)step_state_clear,
    .tp_methods = step_state_methods,
    .tp_members = step_state_members,
};
