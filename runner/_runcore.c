/* The module `_runcore`: configure(), the interned names, RunnerState's type (its fields, as member
 * descriptors, and its two compiled methods) and PyInit__runcore. The core's overview: _runcore.h. */
#include "_runcore.h"
#include "structmember.h"

PyObject *slice_rows_function, *make_fit_check, *tensor_copy;
PyTypeObject *tensor_type;
lenfunc tensor_length;
PyObject *s_shape, *s_dtype, *s_is_cpu, *s_is_cuda, *s_get_device, *s_expected, *s_cuda_index, *s_count,
         *s_raw_bs, *s_graph_bs, *s_call, *s_copies, *s_outputs, *s_slice_rows, *s_event, *s_event_with,
         *s_every, *s_record_start, *s_stop, *s_copy, *s_fill_pad_rows, *s_stage, *s_reason, *s_num_tokens,
         *s_adapters, *s_grammar_switched, *s_python_step, *s_python_run, *s_fit_check;
PyObject *non_blocking_kwnames, *empty_tuple, *zero, *one;
PyTypeObject *route_type;
unsigned int route_version;
RouteSlot route_slots[ROUTE_FIELDS];

/* -- RunnerState ---------------------------------------------------------------------------- */
static int runner_state_traverse(RunnerState *self, visitproc visit, void *arg)
{
#define VISIT(f) Py_VISIT(self->f);
    FOR_EACH_FIELD(VISIT)
    return 0;
}

static int runner_state_clear(RunnerState *self)
{
#define CLEAR(f) Py_CLEAR(self->f);
    FOR_EACH_FIELD(CLEAR)
    return 0;
}

static void runner_state_dealloc(RunnerState *self)
{
    PyObject_GC_UnTrack(self);
    runner_state_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A RunnerState before configure() would have no slice_rows to call: refused, by name. */
static PyObject *runner_state_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (slice_rows_function == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_runcore.configure(slice_rows, Route, make_fit_check, Tensor) must be called before a RunnerState "
                                            "is made (replayscope.runner.runner_core.load does)");
        return NULL;
    }
    return PyType_GenericNew(type, args, kwds);
}

static PyMethodDef runner_state_methods[] = {
    {"compiled_step", (PyCFunction)(void (*)(void))compiled_step, METH_FASTCALL | METH_KEYWORDS,
     "GraphRunner.step, compiled: a plain step of a route seen before whose inputs fit runs here; any other "
     "step is GraphRunner._python_step's."},
    {"compiled_run", (PyCFunction)(void (*)(void))compiled_run, METH_FASTCALL | METH_KEYWORDS,
     "GraphRunner._run(route, inputs, num_tokens, eager_fn), compiled; with parity checks on, or inputs that "
     "are not a dict, GraphRunner._python_run's."},
    {NULL}
};

#define OBJ(name, field) {name, T_OBJECT_EX, offsetof(RunnerState, field), 0, NULL},
static PyMemberDef runner_state_members[] = {
    OBJ("_plain_routes", plain_routes) OBJ("_first_input", first_input) OBJ("stage", stage)
    OBJ("_record", record) OBJ("_clock", clock) OBJ("_buffers", buffers) OBJ("step_fn", step_fn)
    OBJ("parity_every", parity_every)
    {"_first_dim", T_PYSSIZET, offsetof(RunnerState, first_dim), 0, NULL},
    {"_dirty_until", T_PYSSIZET, offsetof(RunnerState, dirty_until), 0, "rows at and above this index hold pad values"},
    {NULL}
};

PyTypeObject RunnerStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replayscope.runner._runcore.RunnerState",
    .tp_doc = "The graph runner's step fields and its compiled step (GraphRunner inherits it).",
    .tp_basicsize = sizeof(RunnerState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = runner_state_new,
    .tp_dealloc = (destructor)runner_state_dealloc,
    .tp_traverse = (traverseproc)runner_state_traverse,
    .tp_clear = (inquiry)runner_state_clear,
    .tp_methods = runner_state_methods,
    .tp_members = runner_state_members,
};

/* -- the module ----------------------------------------------------------------------------- */
/* The offsets of route_class's fields, when each is a slot holding an object; else none (by name). */
static int find_route_slots(PyObject *route_class)
{
    Py_CLEAR(route_type);
    for (int i = 0; i < ROUTE_FIELDS; i++) {
        PyObject *slot = PyObject_GetAttr(route_class, route_slots[i].name);
        if (slot == NULL) return -1;
        int usable = Py_IS_TYPE(slot, &PyMemberDescr_Type)
                     && ((PyMemberDescrObject *)slot)->d_member->type == T_OBJECT_EX;
        route_slots[i].offset = usable ? ((PyMemberDescrObject *)slot)->d_member->offset : 0;
        Py_DECREF(slot);
        if (!usable) return 0;
    }
    route_type = (PyTypeObject *)Py_NewRef(route_class);
    route_version = route_type->tp_version_tag;     /* the lookups above gave it one */
    return 0;
}

/* torch.Tensor's C length, where its base type (torch._C.TensorBase) has one: the size at
 * dimension 0 (0 for a 0-d tensor), what Tensor.__len__ returns after its Python checks. */
static lenfunc base_length(PyTypeObject *tensor_class)
{
    PyTypeObject *base = tensor_class->tp_base;
    return base != NULL && base->tp_as_mapping != NULL ? base->tp_as_mapping->mp_length : NULL;
}

static PyObject *configure(PyObject *module, PyObject *args)
{
    PyObject *slice_rows, *route_class, *fit_check_maker, *tensor_class, *copy = NULL;
    if (!PyArg_ParseTuple(args, "OO!OO!:configure", &slice_rows, &PyType_Type, &route_class, &fit_check_maker,
                          &PyType_Type, &tensor_class))
        return NULL;
    if (!PyCallable_Check(slice_rows) || (fit_check_maker != Py_None && !PyCallable_Check(fit_check_maker))) {
        PyErr_SetString(PyExc_TypeError, "configure(slice_rows, Route, make_fit_check, Tensor): slice_rows must be "
                                         "callable, make_fit_check callable or None");
        return NULL;
    }
    if (find_route_slots(route_class) < 0 || (copy = PyObject_GetAttr(tensor_class, s_copy)) == NULL) return NULL;
    Py_XSETREF(slice_rows_function, Py_NewRef(slice_rows));
    Py_XSETREF(make_fit_check, Py_NewRef(fit_check_maker));
    Py_XSETREF(tensor_copy, copy);
    Py_XSETREF(tensor_type, (PyTypeObject *)Py_NewRef(tensor_class));
    tensor_length = base_length(tensor_type);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(slice_rows, Route, make_fit_check, Tensor): the function that cuts a stand-in's outputs to the "
     "batch's rows, the class of the routes a step reads (routes.slice_rows, routes.Route), what makes a route's "
     "fit check from a tuple of inputs that fit, or None: every step matched in full (fit_checks.fit_check_maker), "
     "and torch.Tensor (an input of exactly that type has its batch size read by torch's C length, a buffer of it "
     "is copied into through torch.Tensor.copy_)."},
    {NULL}
};

static struct PyModuleDef runcore_module = {
    PyModuleDef_HEAD_INIT, "_runcore", "The compiled core of the graph runner's step (see _runcore.h).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__runcore(void)
{
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_shape, "shape") INTERN(s_dtype, "dtype") INTERN(s_is_cpu, "is_cpu") INTERN(s_is_cuda, "is_cuda")
    INTERN(s_get_device, "get_device") INTERN(s_expected, "expected") INTERN(s_cuda_index, "cuda_index")
    INTERN(s_count, "count") INTERN(s_raw_bs, "raw_bs") INTERN(s_graph_bs, "graph_bs") INTERN(s_call, "call")
    INTERN(s_copies, "copies") INTERN(s_outputs, "outputs") INTERN(s_slice_rows, "slice_rows")
    INTERN(s_event, "event") INTERN(s_event_with, "event_with") INTERN(s_every, "every")
    INTERN(s_record_start, "record_start") INTERN(s_stop, "stop") INTERN(s_copy, "copy_")
    INTERN(s_fill_pad_rows, "fill_pad_rows") INTERN(s_stage, "stage") INTERN(s_reason, "reason")
    INTERN(s_num_tokens, "num_tokens") INTERN(s_adapters, "adapters") INTERN(s_grammar_switched, "grammar_switched")
    INTERN(s_python_step, "_python_step") INTERN(s_python_run, "_python_run") INTERN(s_fit_check, "fit_check")
    PyObject *names[ROUTE_FIELDS] = {[F_EXPECTED] = s_expected, [F_CUDA_INDEX] = s_cuda_index, [F_RAW_BS] = s_raw_bs,
                                     [F_COUNT] = s_count, [F_CALL] = s_call, [F_EVENT] = s_event,
                                     [F_GRAPH_BS] = s_graph_bs, [F_COPIES] = s_copies, [F_OUTPUTS] = s_outputs,
                                     [F_SLICE_ROWS] = s_slice_rows, [F_FIT_CHECK] = s_fit_check};
    for (int i = 0; i < ROUTE_FIELDS; i++) route_slots[i].name = names[i];
    PyObject *non_blocking;
    INTERN(non_blocking, "non_blocking")
    non_blocking_kwnames = PyTuple_Pack(1, non_blocking);
    Py_DECREF(non_blocking);
    if (non_blocking_kwnames == NULL || (empty_tuple = PyTuple_New(0)) == NULL || (zero = PyLong_FromLong(0)) == NULL
        || (one = PyLong_FromLong(1)) == NULL)
        return NULL;
    if (PyType_Ready(&RunnerStateType) < 0) return NULL;
    PyObject *module = PyModule_Create(&runcore_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "RunnerState", (PyObject *)&RunnerStateType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
