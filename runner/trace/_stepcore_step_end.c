/* StepTracking.step_end's body: the step's outcome routed (_route's common case here, the rest in
 * Python) and sent as a `step` event. */
#include "_stepcore.h"

/* StepTracking._decided's common case: the outcome kept for this step's facts (_decisions), found
 * with the key the Python builds; anything else (a miss, a process with no graph captured yet, whose
 * key also holds what the no-graph cause reads) is _decided itself. New reference, or NULL. */
static PyObject *decided(StepState *self, PyObject *raw_bs, Py_ssize_t replays, PyObject *largest)
{
    PyObject *by_stage = NULL, *captured = NULL, *sizes = NULL, *skip = NULL, *kept = NULL, *key = NULL,
             *count = NULL, *outcome = NULL;
    if (self->step_stage == NULL || self->step_inductor == NULL || self->step_hint == NULL) goto python;
    by_stage = PyObject_GetAttr((PyObject *)self, s_captured_by_stage);
    sizes = by_stage == NULL ? NULL : PyObject_GetAttr((PyObject *)self, s_captured_sizes);
    skip = sizes == NULL ? NULL : PyObject_GetAttr((PyObject *)self, s_compile_skip);
    kept = skip == NULL ? NULL : PyObject_GetAttr((PyObject *)self, s_decisions);
    if (kept == NULL || !PyDict_CheckExact(by_stage) || !PyDict_CheckExact(kept)) goto python;
    captured = PyDict_GetItemWithError(by_stage, self->step_stage);      /* .get(stage) or captured_sizes */
    if (captured == NULL && PyErr_Occurred()) goto python;
    int some = captured == NULL ? 0 : truth(captured);
    if (some < 0) goto python;
    captured = some ? captured : sizes;
    int any_graph = truth(captured);
    if (any_graph <= 0) goto python;        /* the key would hold the no-graph state: the Python's case */
    count = PyLong_FromSsize_t(replays);
    key = count == NULL ? NULL : PyTuple_Pack(9, self->step_stage, raw_bs, count, largest, self->step_inductor,
                                              self->step_hint, skip, captured, Py_None);
    outcome = key == NULL ? NULL : Py_XNewRef(PyDict_GetItemWithError(kept, key));
python:
    if (outcome == NULL) {                  /* not kept (or something above failed): the Python decides */
        PyErr_Clear();
        if (count == NULL) count = PyLong_FromSsize_t(replays);
        PyObject *args[3] = {raw_bs, count, largest};
        outcome = count == NULL ? NULL : call_method(self, s_decided, args, 3);
    }
    Py_XDECREF(by_stage); Py_XDECREF(sizes); Py_XDECREF(skip); Py_XDECREF(kept); Py_XDECREF(key);
    Py_XDECREF(count);
    return outcome;
}

/* The table slot for (batch, graph size), the table emptied first when _replayed is another dict. */
static KeptRoute *kept_route(StepState *self, PyObject *replayed, Py_ssize_t raw_bs, Py_ssize_t size)
{
    if (self->kept_routes_of != replayed) {
        forget_routes(self);
        self->kept_routes_of = Py_NewRef(replayed);
    }
    return &self->kept_routes[(size_t)(raw_bs * 31 + size) % KEPT_ROUTES];
}

/* route_out from the kept fields (the evidence of a step that is not eager: the step's note when
 * the outcome has none, as _route says). */
static void route_from(StepState *self, KeptRoute *kept, PyObject *raw_bs, PyObject *route_out[5])
{
    PyObject *evidence = kept->evidence == Py_None && !kept->eager && self->step_note ? self->step_note
                                                                                     : kept->evidence;
    route_out[0] = Py_NewRef(raw_bs);
    route_out[1] = Py_NewRef(kept->mode); route_out[2] = Py_NewRef(kept->graph_bs);
    route_out[3] = Py_NewRef(kept->reason); route_out[4] = Py_NewRef(evidence);
}

/* StepTracking._route's common case: every graph replayed has a size, no Inductor word; the
 * outcome per (batch, graph size) from _replayed, made by causes.replayed on a miss; a step that
 * replayed nothing asks _decided at once, as _route does. Anything else is _route itself.
 * Sets route_out = (raw_bs, mode, graph_bs, reason, evidence), new references. */
static int route_held(StepState *self, PyObject *raw_bs, PyObject *graphs, PyObject *replayed, PyObject *route_out[5])
{
    PyObject *outcome = NULL, *key = NULL, *largest = NULL;
    KeptRoute *kept = NULL;          /* where this step's outcome from _replayed is kept, when it is one */
    Py_ssize_t replays = PyList_GET_SIZE(graphs), max_bs = 0, bs = 0;
    if (replays == 0 && PyLong_CheckExact(raw_bs)) {
        /* no replay: _route would only ask _decided, and so does this */
        outcome = decided(self, raw_bs, 0, zero);
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
    /* _replayed's outcome for (batch, graph size) never changes (causes.replayed reads nothing else):
     * its fields are kept in a table of the core's own, read here at once. */
    bs = PyLong_AsSsize_t(raw_bs);
    if (bs == -1 && PyErr_Occurred()) PyErr_Clear();        /* beyond a C size: not kept */
    else kept = kept_route(self, replayed, bs, max_bs);
    if (kept != NULL && kept->mode != NULL && kept->raw_bs == bs && kept->graph_size == max_bs) {
        route_from(self, kept, raw_bs, route_out);
        return 0;
    }
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
        kept = NULL;                     /* (not kept: what decides it may change) */
        Py_DECREF(outcome);
        outcome = decided(self, raw_bs, replays, largest);
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
    if (kept != NULL) {                  /* the table's slot takes this outcome's fields */
        Py_XSETREF(kept->mode, Py_NewRef(mode)); Py_XSETREF(kept->graph_bs, Py_NewRef(graph_bs));
        Py_XSETREF(kept->reason, Py_NewRef(reason)); Py_XSETREF(kept->evidence, Py_NewRef(evidence));
        kept->raw_bs = bs;
        kept->graph_size = max_bs;
        kept->eager = eager;
    }
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
int end_body(StepState *self)
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
