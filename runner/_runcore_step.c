/* GraphRunner.step and GraphRunner._run, compiled: the plain route looked up, the fast match
 * (_runcore_match.c), the route run, and the hand-off to the runner's Python for anything else
 * (graphs.py is the reference; the overview: _runcore.h).
 *
 * Every function before the route run only reads: a check that cannot decide, or that raises an
 * Exception, hands the whole step to the Python, which does it again and raises its own clear
 * error. From the route run on, an error is the program's, raised where the Python raises it. */
#include "_runcore.h"
#include <limits.h>

/* A check before anything is done raised: an Exception is the Python's to judge (0: hand off);
 * anything else (KeyboardInterrupt) goes on to the program (-1). No error: 0. */
int judged_by_python(void)
{
    if (!PyErr_Occurred()) return 0;
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

static PyObject *python(RunnerState *self, PyObject *name, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames)
{
    PyObject *method = PyObject_GetAttr((PyObject *)self, name);
    if (method == NULL) return NULL;
    PyObject *result = PyObject_Vectorcall(method, args, nargs, kwnames);
    Py_DECREF(method);
    return result;
}

/* A Route's field: read at its slot when the route is exactly the Route type configure() was given,
 * unchanged since (its version tag); else by name, as Python reads it. A new reference or NULL. */
PyObject *route_field(PyObject *route, int field)
{
    if (Py_TYPE(route) == route_type && route_type->tp_version_tag == route_version && route_version != 0) {
        PyObject *value = *(PyObject **)((char *)route + route_slots[field].offset);
        if (value != NULL) return Py_NewRef(value);
    }
    return PyObject_GetAttr(route, route_slots[field].name);
}

static inline int same_name(PyObject *name, PyObject *interned)
{
    return name == interned || PyUnicode_Compare(name, interned) == 0;
}

/* -- before anything is done: the plain route, the fast match, the route's fields ------------- */
/* The runner's fields allow the compiled run: parity checks off, a record callable or None, and a
 * clock when there is one. 1: yes; 0: the Python's; -1: the program's error. */
static int runnable(RunnerState *self)
{
    if (self->parity_every == NULL || self->record == NULL || (self->record != Py_None && self->clock == NULL))
        return 0;
    int parity = truth(self->parity_every);
    return parity < 0 ? judged_by_python() : !parity;
}

/* first->tensor.shape[dim] (a new reference or NULL). An input of exactly torch.Tensor has its
 * size at dimension 0 read by torch's C length (what Tensor.__len__ returns after its checks; a
 * torch function mode sees __len__ asked where .shape would be); else, and for a 0-d tensor, its
 * shape is read (kept in first->shape for its own match). */
static PyObject *batch_size(StepInputs *first, Py_ssize_t dim)
{
    if (dim == 0 && tensor_length != NULL && Py_TYPE(first->tensor) == tensor_type) {
        Py_ssize_t rows = tensor_length(first->tensor);
        if (rows > 0) return PyLong_FromSsize_t(rows);
        if (rows < 0 && judged_by_python() < 0) return NULL;    /* an Exception: read the shape as Python does */
    }
    first->shape = PyObject_GetAttr(first->tensor, s_shape);
    return first->shape == NULL ? NULL : PySequence_GetItem(first->shape, dim);
}

/* GraphRunner.step's lookup: the plain route of `stage` and the first input's batch size.
 * 1: found (*route and *first, new references); 0: none, or nothing the Python would find one
 * for; -1. */
static int plain_route(RunnerState *self, PyObject *inputs, PyObject *stage, PyObject **route, StepInputs *first)
{
    *route = NULL;
    if (self->plain_routes == NULL || !PyDict_CheckExact(self->plain_routes) || self->first_input == NULL)
        return 0;
    PyObject *routes = Py_NewRef(self->plain_routes);     /* held: reading a shape may run Python code */
    first->tensor = Py_XNewRef(PyDict_GetItemWithError(inputs, self->first_input));
    PyObject *size = first->tensor == NULL ? NULL : batch_size(first, self->first_dim);
    PyObject *key = size == NULL ? NULL : PyTuple_Pack(2, stage, size);
    Py_XDECREF(size);
    if (key != NULL) {
        *route = Py_XNewRef(PyDict_GetItemWithError(routes, key));
        Py_DECREF(key);
    }
    Py_DECREF(routes);
    return *route != NULL ? 1 : judged_by_python();
}

/* What a step reads of its route (routes.py Route), read before anything is done. */
typedef struct {
    PyObject *raw_bs, *count, *call, *copies, *outputs, *event;
    Py_ssize_t rows, graph_rows;            /* raw_bs, and graph_bs when the route launches */
    int slice;                              /* route.slice_rows */
} RouteView;

static void release_view(RouteView *view)
{
    Py_CLEAR(view->raw_bs);
    Py_CLEAR(view->count);
    Py_CLEAR(view->call);
    Py_CLEAR(view->copies);
    Py_CLEAR(view->outputs);
    Py_CLEAR(view->event);
}

/* Exact (name, rows) pairs: what the copies loop takes without a check per step. */
static int pairs(PyObject *copies)
{
    if (!PyTuple_CheckExact(copies)) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(copies); i++) {
        PyObject *pair = PyTuple_GET_ITEM(copies, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) return 0;
    }
    return 1;
}

/* 1: read (release_view after); 0: the Python's to run; -1. Released unless 1. */
static int read_route(PyObject *route, RouteView *view)
{
    *view = (RouteView){NULL};
    int read = 0;
    if ((view->raw_bs = route_field(route, F_RAW_BS)) == NULL || (view->count = route_field(route, F_COUNT)) == NULL
        || (view->call = route_field(route, F_CALL)) == NULL || (view->event = route_field(route, F_EVENT)) == NULL)
        goto done;
    if (!PyLong_CheckExact(view->raw_bs) || ((view->rows = PyLong_AsSsize_t(view->raw_bs)) == -1 && PyErr_Occurred()))
        goto done;
    if (view->call != Py_None) {
        PyObject *graph_bs = route_field(route, F_GRAPH_BS);
        if (graph_bs == NULL) goto done;
        view->graph_rows = PyLong_CheckExact(graph_bs) ? PyLong_AsSsize_t(graph_bs) : -1;
        Py_DECREF(graph_bs);
        if (view->graph_rows < 0 || (view->copies = route_field(route, F_COPIES)) == NULL || !pairs(view->copies)
            || (view->outputs = route_field(route, F_OUTPUTS)) == NULL)
            goto done;
        if (view->outputs == Py_None) {
            PyObject *slice = route_field(route, F_SLICE_ROWS);
            view->slice = slice == NULL ? -1 : truth(slice);
            Py_XDECREF(slice);
            if (view->slice < 0) goto done;
        }
    }
    read = 1;
done:
    if (read) return 1;
    release_view(view);
    return judged_by_python();
}

/* -- the route run: GraphRunner._run ---------------------------------------------------------- */
static PyObject *need(PyObject *field, const char *name)
{
    if (field == NULL) PyErr_Format(PyExc_AttributeError, "graph runner has no attribute '%s'", name);
    return field;
}

/* route.count[0]: read from the list itself when it is one (a new reference or NULL). */
static PyObject *seen_of(PyObject *count)
{
    if (PyList_CheckExact(count) && PyList_GET_SIZE(count) > 0) return Py_NewRef(PyList_GET_ITEM(count, 0));
    return PyObject_GetItem(count, zero);
}

/* route.count[0] % clock.every == 0: a step to time. 1, 0, or -1. */
static int due(PyObject *count, PyObject *clock)
{
    PyObject *seen = seen_of(count);
    PyObject *every = seen == NULL ? NULL : PyObject_GetAttr(clock, s_every);
    int timed = -1, seen_over, every_over;
    if (every != NULL && PyLong_CheckExact(seen) && PyLong_CheckExact(every)) {
        long long s = PyLong_AsLongLongAndOverflow(seen, &seen_over), e = PyLong_AsLongLongAndOverflow(every, &every_over);
        if (!seen_over && !every_over && s >= 0 && e > 0) timed = s % e == 0;
    }
    if (timed < 0 && every != NULL) {       /* Python's arithmetic for anything else */
        PyObject *rest = PyNumber_Remainder(seen, every);
        timed = rest == NULL ? -1 : PyObject_RichCompareBool(rest, zero, Py_EQ);
        Py_XDECREF(rest);
    }
    Py_XDECREF(seen);
    Py_XDECREF(every);
    return timed;
}

/* route.count[0] += 1: in the list itself when it is one holding an int short of overflow; else as
 * Python does it. */
static int count_step(PyObject *count)
{
    PyObject *seen = seen_of(count), *next = NULL;
    int overflow = 1;
    long long value = seen != NULL && PyLong_CheckExact(seen) ? PyLong_AsLongLongAndOverflow(seen, &overflow) : 0;
    if (seen != NULL && !overflow && value < LLONG_MAX && PyList_CheckExact(count)) {
        Py_DECREF(seen);
        next = PyLong_FromLongLong(value + 1);
        return next == NULL ? -1 : PyList_SetItem(count, 0, next);          /* the list takes the reference */
    }
    next = seen == NULL ? NULL : PyNumber_InPlaceAdd(seen, one);
    Py_XDECREF(seen);
    int done = next == NULL ? -1 : PyObject_SetItem(count, zero, next);
    Py_XDECREF(next);
    return done;
}

/* inputs[name], the copies' i-th: the fast match's own read of it when it kept one for that name
 * (the route's expected inputs and its copies list the same names in the same order). */
static PyObject *input_of(PyObject *inputs, PyObject *name, Py_ssize_t i, StepInputs *matched)
{
    if (matched != NULL && matched->given != NULL && i < PyTuple_GET_SIZE(matched->given)
        && PyTuple_GET_ITEM(PyTuple_GET_ITEM(matched->expected, i), 0) == name)
        return Py_NewRef(PyTuple_GET_ITEM(matched->given, i));
    return PyObject_GetItem(inputs, name);
}

/* for name, rows in route.copies: rows.copy_(inputs[name], non_blocking=True) (torch.Tensor.copy_
 * called as it is when rows are exactly a torch.Tensor, else looked up on them by name) */
static int copy_inputs(PyObject *copies, PyObject *inputs, StepInputs *matched)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(copies); i++) {
        PyObject *pair = PyTuple_GET_ITEM(copies, i), *rows = PyTuple_GET_ITEM(pair, 1);
        PyObject *value = input_of(inputs, PyTuple_GET_ITEM(pair, 0), i, matched);
        if (value == NULL) return -1;
        PyObject *stack[3] = {rows, value, Py_True};
        PyObject *done = Py_TYPE(rows) == tensor_type ? PyObject_Vectorcall(tensor_copy, stack, 2, non_blocking_kwnames)
                       : PyObject_VectorcallMethod(s_copy, stack, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                                   non_blocking_kwnames);
        Py_DECREF(value);
        if (done == NULL) return -1;
        Py_DECREF(done);
    }
    return 0;
}

/* The launch of a route with a call: copies, pad rows a larger batch left, the call, the row mark,
 * the outputs (the graph's static rows, or a stand-in's cut to the batch). A new reference or NULL. */
static PyObject *launch(RunnerState *self, RouteView *view, PyObject *inputs, StepInputs *matched)
{
    Py_ssize_t raw = view->rows, graph = view->graph_rows;
    if (copy_inputs(view->copies, inputs, matched) < 0) return NULL;
    if (graph > raw && self->dirty_until > raw) {           /* rows a larger batch left behind */
        PyObject *end = PyLong_FromSsize_t(self->dirty_until < graph ? self->dirty_until : graph);
        PyObject *buffers = Py_XNewRef(need(self->buffers, "_buffers"));
        PyObject *stack[3] = {buffers, view->raw_bs, end};
        PyObject *done = end == NULL || buffers == NULL ? NULL
                       : PyObject_VectorcallMethod(s_fill_pad_rows, stack, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_XDECREF(end);
        Py_XDECREF(buffers);
        if (done == NULL) return NULL;
        Py_DECREF(done);
    }
    PyObject *outputs = PyObject_CallNoArgs(view->call);
    if (outputs == NULL) return NULL;
    if (graph > raw) {                      /* after the launch: rows at and above the mark hold pad values */
        if (self->dirty_until <= graph) self->dirty_until = raw;
    } else if (raw > self->dirty_until) {
        self->dirty_until = raw;
    }
    if (view->outputs != Py_None) {
        Py_SETREF(outputs, Py_NewRef(view->outputs));
    } else if (view->slice) {
        PyObject *args[2] = {outputs, view->raw_bs};
        Py_SETREF(outputs, PyObject_Vectorcall(slice_rows_function, args, 2, NULL));
    }
    return outputs;
}

/* The step event: record(route.event or route.event_with(num_tokens), clock.stop(timing) or None). */
static int record_step(PyObject *record, PyObject *route, RouteView *view, PyObject *num_tokens, PyObject *clock,
                       PyObject *timing)
{
    if (count_step(view->count) < 0) return -1;
    PyObject *with[2] = {route, num_tokens};
    PyObject *event = num_tokens == Py_None ? Py_NewRef(view->event)
                    : PyObject_VectorcallMethod(s_event_with, with, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (event == NULL) return -1;
    PyObject *stopped = timing == Py_None ? Py_NewRef(Py_None) : PyObject_CallMethodOneArg(clock, s_stop, timing);
    if (stopped == NULL) {
        Py_DECREF(event);
        return -1;
    }
    PyObject *stack[3] = {NULL, event, stopped};
    PyObject *done = PyObject_Vectorcall(record, stack + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(event);
    Py_DECREF(stopped);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* GraphRunner._run on a route read: timed or not, eager or launched, then recorded. Outputs or NULL. */
static PyObject *run_view(RunnerState *self, PyObject *route, RouteView *view, PyObject *inputs,
                          StepInputs *matched, PyObject *num_tokens, PyObject *eager_fn)
{
    PyObject *record = Py_XNewRef(need(self->record, "_record")), *clock = NULL, *timing = NULL, *outputs = NULL;
    if (record == NULL) return NULL;
    if (record != Py_None) {                /* timed: the first step of its key, then 1 in `every` */
        if ((clock = Py_XNewRef(need(self->clock, "_clock"))) == NULL) goto error;
        int timed = due(view->count, clock);
        if (timed < 0) goto error;
        timing = timed ? PyObject_CallMethodNoArgs(clock, s_record_start) : Py_NewRef(Py_None);
        if (timing == NULL) goto error;
    }
    if (view->call == Py_None) {            /* eager: (eager_fn or self.step_fn)(**inputs) */
        int given = eager_fn == Py_None ? 0 : truth(eager_fn);
        if (given < 0) goto error;
        PyObject *fn = Py_XNewRef(given ? eager_fn : need(self->step_fn, "step_fn"));
        outputs = fn == NULL ? NULL : PyObject_Call(fn, empty_tuple, inputs);
        Py_XDECREF(fn);
    } else {
        outputs = launch(self, view, inputs, matched);
    }
    if (outputs == NULL) goto error;
    if (record != Py_None && record_step(record, route, view, num_tokens, clock, timing) < 0) goto error;
    Py_DECREF(record);
    Py_XDECREF(clock);
    Py_XDECREF(timing);
    return outputs;
error:
    Py_DECREF(record);
    Py_XDECREF(clock);
    Py_XDECREF(timing);
    Py_XDECREF(outputs);
    return NULL;
}

/* The route run, or the hand-off to `fallback` (the runner's Python) when it cannot be done here. */
static PyObject *run_or_hand_off(RunnerState *self, PyObject *route, PyObject *inputs, StepInputs *matched,
                                 PyObject *num_tokens,
                                 PyObject *eager_fn, PyObject *fallback, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    RouteView view;
    int read = read_route(route, &view);
    if (read < 0) return NULL;
    if (read == 0) return python(self, fallback, args, nargs, kwnames);
    PyObject *outputs = run_view(self, route, &view, inputs, matched, num_tokens, eager_fn);
    release_view(&view);
    return outputs;
}

/* -- the methods ------------------------------------------------------------------------------ */
/* GraphRunner.step(inputs, *, stage=None, reason=None, num_tokens=None, adapters=frozenset(),
 * grammar_switched=False): a plain step (no reason, adapters or grammar switch) on a dict whose
 * route was made before and whose inputs fit runs here; any other step is _python_step's. */
PyObject *compiled_step(RunnerState *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *stage = NULL, *num_tokens = Py_None, *route = NULL;
    int plain = nargs == 1 && PyDict_CheckExact(args[0]);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; plain > 0 && k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k), *value = args[nargs + k];
        if (same_name(name, s_stage)) {
            stage = value;
        } else if (same_name(name, s_num_tokens)) {
            num_tokens = value;
        } else if (same_name(name, s_reason)) {
            plain = value == Py_None;
        } else if (same_name(name, s_adapters) || same_name(name, s_grammar_switched)) {
            plain = truth(value);           /* `not adapters and not grammar_switched` */
            plain = plain < 0 ? judged_by_python() : !plain;
        } else {
            plain = 0;                      /* the Python says what is wrong with it */
        }
    }
    if (plain < 0) return NULL;
    if (stage == NULL || stage == Py_None)  /* stage or self.stage: a non-empty str, or the runner's */
        stage = self->stage;
    else if (!PyUnicode_CheckExact(stage) || PyUnicode_GET_LENGTH(stage) == 0)
        plain = 0;
    if (plain > 0) plain = stage == NULL ? 0 : runnable(self);
    StepInputs first = {NULL};
    Py_XINCREF(stage);                      /* held: the checks may run Python code */
    if (plain > 0) plain = plain_route(self, args[0], stage, &route, &first);
    if (plain > 0) plain = inputs_fit(args[0], route, &first);
    Py_XDECREF(stage);
    PyObject *outputs = plain > 0 ? run_or_hand_off(self, route, args[0], &first, num_tokens, Py_None, s_python_step,
                                                    args, nargs, kwnames)
                      : plain == 0 ? python(self, s_python_step, args, nargs, kwnames) : NULL;
    Py_XDECREF(first.tensor);
    Py_XDECREF(first.shape);
    Py_XDECREF(first.expected);
    Py_XDECREF(first.given);
    Py_XDECREF(route);
    return outputs;
}

/* GraphRunner._run(route, inputs, num_tokens, eager_fn): here when the inputs are a dict and parity
 * checks are off; else _python_run's. */
PyObject *compiled_run(RunnerState *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int here = nargs == 4 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0) && PyDict_CheckExact(args[1]);
    if (here) here = runnable(self);
    if (here < 0) return NULL;
    if (!here) return python(self, s_python_run, args, nargs, kwnames);
    return run_or_hand_off(self, args[0], args[1], NULL, args[2], args[3], s_python_run, args, nargs, kwnames);
}
