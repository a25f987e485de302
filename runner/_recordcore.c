/* The compiled step recorder of the emitter: Emitter.step and Emitter.step_fields in C.
 *
 * The reference is Python (runner/emitter.py, the same names): a step's event is RECORD values
 * added to the emitter's queue at once: its sequence number (next of the emitter's counter), the
 * wall-clock time (time.time()), then the step's fields and its timing. Called from Python or from
 * the compiled cores, the C version makes no Python frame: the call is what a step costs least.
 * Built optionally (setup.py); REPLAYSCOPE_PURE_PYTHON=1 or no compiler: the Python methods.
 *
 * Recorder(queue, counter) holds the emitter's queue (a list) and counter (itertools.count): both
 * made once by the emitter and never replaced. The values of one event are all made first, then
 * added by one extend of the list, which runs no Python code and keeps the GIL: the emitter's
 * thread, which takes whole events with one slice, never sees half of one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

#define RECORD 12      /* values per event: event_records.RECORD */

static PyObject *s_step;                           /* the kind of a step event given as fields */
static PyObject *step_names[9];                    /* Emitter.step's parameters, in order */
static const char *step_parameters[9] = {"stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens",
                                         "reason", "timing", "evidence"};

typedef struct {
    PyObject_HEAD
    PyObject *queue, *counter;
} Recorder;

/* time.time(): the system clock, converted as Python converts it. */
static PyObject *wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (ns % 1000000000LL == 0)
        return PyFloat_FromDouble((double)(ns / 1000000000LL));
    return PyFloat_FromDouble((double)ns / 1e9);
}

/* The event's sequence number and time, then `fields` (RECORD - 2 borrowed values), added at once. */
static PyObject *add_event(Recorder *self, PyObject *const *fields)
{
    PyObject *seq = PyIter_Next(self->counter);
    if (seq == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the emitter's counter ended");
        return NULL;
    }
    PyObject *now = wall_time();
    if (now == NULL) { Py_DECREF(seq); return NULL; }
    PyObject *values = PyTuple_New(RECORD);      /* added by one extend: the list grows once */
    if (values == NULL) { Py_DECREF(seq); Py_DECREF(now); return NULL; }
    PyTuple_SET_ITEM(values, 0, seq);
    PyTuple_SET_ITEM(values, 1, now);
    for (int i = 2; i < RECORD; i++) PyTuple_SET_ITEM(values, i, Py_NewRef(fields[i - 2]));
    PyObject *queue = PySequence_InPlaceConcat(self->queue, values);     /* list.extend: all or nothing */
    Py_DECREF(values);
    if (queue == NULL) return NULL;
    Py_DECREF(queue);
    Py_RETURN_NONE;
}

/* Emitter.step(stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, timing, evidence=None) */
static PyObject *recorder_step(Recorder *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *given[9] = {NULL};
    if (nargs > 9)
        return PyErr_Format(PyExc_TypeError, "step() takes at most 9 arguments (%zd given)", nargs);
    for (Py_ssize_t i = 0; i < nargs; i++) given[i] = args[i];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int i = 0; i < 9 && slot < 0; i++) {
            if (name == step_names[i] || PyUnicode_Compare(name, step_names[i]) == 0) slot = i;
            else if (PyErr_Occurred()) return NULL;
        }
        if (slot < 0) return PyErr_Format(PyExc_TypeError, "step() got an unexpected keyword argument '%U'", name);
        if (given[slot] != NULL)
            return PyErr_Format(PyExc_TypeError, "step() got multiple values for argument '%U'", name);
        given[slot] = args[nargs + k];
    }
    for (int i = 0; i < 8; i++)
        if (given[i] == NULL)
            return PyErr_Format(PyExc_TypeError, "step() missing required argument '%s'", step_parameters[i]);
    /* ..., stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence, timing */
    PyObject *fields[RECORD - 2] = {Py_Ellipsis, given[0], given[1], given[2], given[3], given[4], given[5],
                                    given[6], given[8] != NULL ? given[8] : Py_None, given[7]};
    return add_event(self, fields);
}

/* Emitter.step_fields(fields, timing) */
static PyObject *recorder_step_fields(Recorder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "step_fields() takes 2 arguments (%zd given)", nargs);
    PyObject *fields[RECORD - 2] = {s_step, args[0], Py_None, Py_None, Py_None, Py_None, Py_None, Py_None,
                                    Py_None, args[1]};
    return add_event(self, fields);
}

static int recorder_init(Recorder *self, PyObject *args, PyObject *kwargs)
{
    PyObject *queue, *counter;
    if (!PyArg_ParseTuple(args, "O!O:Recorder", &PyList_Type, &queue, &counter)) return -1;
    if (!PyIter_Check(counter)) {
        PyErr_SetString(PyExc_TypeError, "Recorder: the counter must be an iterator (itertools.count)");
        return -1;
    }
    Py_XSETREF(self->queue, Py_NewRef(queue));
    Py_XSETREF(self->counter, Py_NewRef(counter));
    return 0;
}

static int recorder_traverse(Recorder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->queue);
    Py_VISIT(self->counter);
    return 0;
}

static int recorder_clear(Recorder *self)
{
    Py_CLEAR(self->queue);
    Py_CLEAR(self->counter);
    return 0;
}

static void recorder_dealloc(Recorder *self)
{
    PyObject_GC_UnTrack(self);
    recorder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef recorder_methods[] = {
    {"step", (PyCFunction)(void (*)(void))recorder_step, METH_FASTCALL | METH_KEYWORDS,
     "Emitter.step: one step's event queued."},
    {"step_fields", (PyCFunction)(void (*)(void))recorder_step_fields, METH_FASTCALL,
     "Emitter.step_fields: one step's event queued, its fields made once by the caller."},
    {NULL}
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replayscope.runner._recordcore.Recorder",
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Recorder(queue, counter): an emitter's step and step_fields, compiled.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)recorder_init,
    .tp_traverse = (traverseproc)recorder_traverse,
    .tp_clear = (inquiry)recorder_clear,
    .tp_dealloc = (destructor)recorder_dealloc,
    .tp_methods = recorder_methods,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_recordcore", "The emitter's step recorder, compiled (runner/emitter.py is the reference).",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__recordcore(void)
{
    if (PyType_Ready(&RecorderType) < 0) return NULL;
    if ((s_step = PyUnicode_InternFromString("step")) == NULL) return NULL;
    for (int i = 0; i < 9; i++)
        if ((step_names[i] = PyUnicode_InternFromString(step_parameters[i])) == NULL) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Recorder", (PyObject *)&RecorderType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
