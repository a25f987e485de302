/* The callables a traced program calls: the replay hook (hooks._replay), the step wrapper
 * (recipes.step_wrapper) with its batch reader (tensor_batch's cache, else the recipe's batch_of),
 * and the graph-tree call (graph_trees.install_graph_tree_hooks' run: a zero-configuration step). */
#include "_stepcore.h"

/* -- the wrappers: callables that bind as methods, with a __dict__ (functools.update_wrapper) -- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    StepState *tracer;
    PyObject *original;
    PyObject *batch_of, *recipe, *recipe_failed;     /* StepWrapper only */
    PyObject *batches, *tensor_type_of, *tensor_type; /* StepWrapper with tensor_batch's cache only */
    PyObject *fallback;                               /* TreeRun only: the Python run, for the uncommon */
    int auto_steps;                                   /* TreeRun only: each call a step (no --step) */
} Wrapper;

static int wrapper_traverse(Wrapper *self, visitproc visit, void *arg)
{
    Py_VISIT(self->dict); Py_VISIT(self->tracer); Py_VISIT(self->original); Py_VISIT(self->batch_of);
    Py_VISIT(self->recipe); Py_VISIT(self->recipe_failed); Py_VISIT(self->batches);
    Py_VISIT(self->tensor_type_of); Py_VISIT(self->tensor_type); Py_VISIT(self->fallback);
    return 0;
}

static int wrapper_clear(Wrapper *self)
{
    Py_CLEAR(self->dict); Py_CLEAR(self->tracer); Py_CLEAR(self->original); Py_CLEAR(self->batch_of);
    Py_CLEAR(self->recipe); Py_CLEAR(self->recipe_failed); Py_CLEAR(self->batches);
    Py_CLEAR(self->tensor_type_of); Py_CLEAR(self->tensor_type); Py_CLEAR(self->fallback);
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

/* list.append / list.pop on what is a list (through its methods on anything else) */
static int list_append(PyObject *list, PyObject *item)
{
    if (PyList_CheckExact(list)) return PyList_Append(list, item);
    PyObject *done = PyObject_CallMethodOneArg(list, s_append, item);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

static int list_pop(PyObject *list)
{
    Py_ssize_t n = PyList_CheckExact(list) ? PyList_GET_SIZE(list) : -1;
    if (n > 0) return PyList_SetSlice(list, n - 1, n, NULL);
    PyObject *done = PyObject_CallMethodNoArgs(list, s_pop);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
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
            if (tracer->step_graphs == NULL)
                return PyErr_Format(PyExc_AttributeError, "tracer has no attribute 'step_graphs'");
            if (list_append(tracer->step_graphs, args[0]) < 0) return NULL;
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
        restore_program_error(error, failed);
        return NULL;
    }
    if (core_end(tracer) < 0) { Py_DECREF(result); return NULL; }
    return result;
}

/* -- the graph-tree call ------------------------------------------------------------------- */
/* GraphTrees.batch's common case: the function's batch position known (trees.batch_index) and an
 * int >= 1 there. NULL (no error set): not known here; the Python run decides. */
static PyObject *tree_batch(PyObject *trees, PyObject *inputs, PyObject *function_id)
{
    PyObject *index_of = PyObject_GetAttr(trees, s_batch_index);
    if (index_of == NULL || !PyDict_CheckExact(index_of)) { Py_XDECREF(index_of); PyErr_Clear(); return NULL; }
    PyObject *where = PyDict_GetItemWithError(index_of, function_id), *value = NULL;
    if (where != NULL && PyTuple_CheckExact(where) && PyTuple_GET_SIZE(where) == 2) {
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(where, 0));
        int is_size = index == -1 && PyErr_Occurred() ? -1 : truth(PyTuple_GET_ITEM(where, 1));
        PyObject *item = is_size < 0 ? NULL : PySequence_GetItem(inputs, index);
        if (item != NULL && !is_size) {
            PyObject *shape = PyObject_GetAttr(item, s_shape);
            Py_SETREF(item, shape == NULL ? NULL : PySequence_GetItem(shape, 0));
            Py_XDECREF(shape);
        }
        if (item != NULL && PyLong_CheckExact(item) && PyLong_AsSsize_t(item) >= 1)
            value = Py_NewRef(item);
        Py_XDECREF(item);
    }
    Py_DECREF(index_of);
    PyErr_Clear();           /* whatever went wrong here, the Python run does it again, and answers */
    return value;
}

/* graph_trees.install_graph_tree_hooks' run: one call of a compiled function through Inductor's
 * graph trees (without --step a step of its own); its common case here, anything else the Python run. */
static PyObject *tree_run_call(Wrapper *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    StepState *tracer = self->tracer;
    if (PyVectorcall_NARGS(nargsf) != 3 || kwnames != NULL || tracer->in_step == NULL)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *inputs = args[1], *function_id = args[2];
    int running = truth(tracer->in_step), started = 0;
    if (running < 0) return NULL;
    PyObject *trees = PyObject_GetAttr((PyObject *)tracer, s_graph_trees);     /* read once, as the Python run */
    if (trees == NULL) return NULL;
    if (self->auto_steps && !running) {
        PyObject *bs = tree_batch(trees, inputs, function_id);
        if (bs == NULL) {
            Py_DECREF(trees);
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        }
        started = core_begin(tracer, s_decode, bs, bs, Py_None);
        Py_DECREF(bs);
        if (started < 0) {
            if (hook_failed(tracer, s_inductor_step) < 0) { Py_DECREF(trees); return NULL; }
            started = 0;
        }
    }
    Py_ssize_t replays = tracer->total_replays;
    PyObject *recordings = PyObject_GetAttr((PyObject *)tracer, s_inductor_recordings);
    PyObject *calls = recordings == NULL ? NULL : PyObject_GetAttr((PyObject *)tracer, s_inductor_calls);
    PyObject *result = NULL;
    if (calls == NULL || list_append(calls, function_id) < 0 || PyObject_SetAttr(trees, s_mismatch, Py_None) < 0)
        goto done;
    result = PyObject_Vectorcall(self->original, args, nargsf, NULL);
    if (result == NULL) {                 /* the program's error: the call is not counted, the step not recorded */
        PyObject *error = take_error();
        int failed = list_pop(calls) < 0;
        if (!failed && started) step_abort_core(tracer, &failed);
        restore_program_error(error, failed);
        goto done;
    }
    /* inductor_call_end's common case: outside a step, or a replay with no recording, nothing to say */
    int fast = -1;
    running = truth(tracer->in_step);
    if (running == 0) {
        fast = 1;
    } else if (running > 0 && tracer->total_replays != replays) {
        PyObject *now = PyObject_GetAttr((PyObject *)tracer, s_inductor_recordings);
        fast = now == NULL ? -1 : PyObject_RichCompareBool(now, recordings, Py_EQ);
        Py_XDECREF(now);
    }
    if (fast < 0) PyErr_Clear();
    if (fast > 0) {
        if (list_pop(calls) < 0 && hook_failed(tracer, s_inductor_call) < 0) Py_CLEAR(result);
    } else {
        PyObject *before = PyLong_FromSsize_t(replays);
        PyObject *end_args[3] = {function_id, before, recordings};
        PyObject *ended = before == NULL ? NULL : call_method(tracer, s_inductor_call_end, end_args, 3);
        Py_XDECREF(before);
        if (ended != NULL) Py_DECREF(ended);
        else if (hook_failed(tracer, s_inductor_call) < 0) Py_CLEAR(result);
    }
    if (result != NULL && started && core_end(tracer) < 0) Py_CLEAR(result);
done:
    Py_XDECREF(recordings);
    Py_XDECREF(calls);
    Py_XDECREF(trees);
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
    self->tensor_type_of = self->tensor_type = self->fallback = NULL;
    self->auto_steps = 0;
    PyObject_GC_Track(self);
    if (self->dict == NULL || PyDict_SetItem(self->dict, s_wrapped, original) < 0) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}


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

static PyObject *tree_run_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"tracer", "original", "fallback", "auto_steps", NULL};
    PyObject *tracer, *original, *fallback;
    int auto_steps;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOp:TreeRun", names, &StepStateType, &tracer, &original,
                                     &fallback, &auto_steps))
        return NULL;
    Wrapper *self = (Wrapper *)wrapper_make(type, (StepState *)tracer, original, (vectorcallfunc)tree_run_call);
    if (self == NULL) return NULL;
    self->fallback = Py_NewRef(fallback);
    self->auto_steps = auto_steps;
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

#define WRAPPER_TYPE(NAME, PYNAME, DOC, NEW) PyTypeObject NAME = {                   \
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
WRAPPER_TYPE(TreeRunType, "TreeRun",
             "TreeRun(tracer, original, fallback, auto_steps): graph_trees' run (one call of a compiled function "
             "through Inductor's graph trees), its common case compiled; anything else is `fallback`, the Python run.",
             tree_run_new)
