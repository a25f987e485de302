/* The module `_stepcore`: configure(), the interned names, the error helpers the files share, and
 * PyInit__stepcore. The core's overview and its files: _stepcore.h. */
#include "_stepcore.h"

/* -- what configure() gives, and the names used ------------------------------------------- */
/* steps.py's module and its `device`: the functions the Python calls (replayed, CudaClock.drop,
 * device.cuda_in_use, device.capturing) are looked up there at each call, as the Python does. */
PyObject *steps_module, *device_module;
PyObject *s_decode, *s_padded, *s_eager, *s_step, *s_mode, *s_graph_bs, *s_reason, *s_evidence,
         *s_size, *s_route, *s_start_timing, *s_stop_timing, *s_ensure_run, *s_hook_error,
         *s_capture_phase, *s_decided, *s_every, *s_record_start, *s_shape, *s_dtype, *s_step_begin,
         *s_append, *s_wrapped, *s_replayed, *s_cuda_clock_class, *s_drop, *s_cuda_in_use, *s_capturing, *s_seen,
         *s_pop, *s_graph_trees, *s_batch_index, *s_inductor_recordings, *s_inductor_calls, *s_mismatch,
         *s_inductor_call_end, *s_inductor_step, *s_inductor_call, *s_captured_by_stage, *s_captured_sizes,
         *s_compile_skip, *s_decisions;
PyObject *zero, *one;

/* An exception raised and taken out of the error indicator (normalized), and put back. */
PyObject *take_error(void)
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

void restore_error(PyObject *error)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(error);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(error)), error, PyException_GetTraceback(error));
#endif
}

/* The program's error (taken) put back; or, when handling it failed (`failed`, that error set), the
 * failure, with the program's error as its context (as Python chains an error raised in an except). */
void restore_program_error(PyObject *error, int failed)
{
    if (failed) {
        PyObject *other = take_error();
        PyException_SetContext(other, error);
        restore_error(other);
    } else {
        restore_error(error);
    }
}

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
    INTERN(s_pop, "pop") INTERN(s_graph_trees, "graph_trees") INTERN(s_batch_index, "batch_index")
    INTERN(s_inductor_recordings, "inductor_recordings") INTERN(s_inductor_calls, "inductor_calls")
    INTERN(s_mismatch, "mismatch") INTERN(s_inductor_call_end, "inductor_call_end")
    INTERN(s_inductor_step, "Inductor step") INTERN(s_inductor_call, "Inductor call")
    INTERN(s_captured_by_stage, "captured_by_stage") INTERN(s_captured_sizes, "captured_sizes")
    INTERN(s_compile_skip, "compile_skip") INTERN(s_decisions, "_decisions")
    if ((zero = PyLong_FromLong(0)) == NULL || (one = PyLong_FromLong(1)) == NULL) return NULL;
    if (PyType_Ready(&StepStateType) < 0 || PyType_Ready(&StepWrapperType) < 0 || PyType_Ready(&ReplayHookType) < 0
        || PyType_Ready(&TreeRunType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&stepcore_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "StepState", (PyObject *)&StepStateType) < 0
        || PyModule_AddObjectRef(module, "StepWrapper", (PyObject *)&StepWrapperType) < 0
        || PyModule_AddObjectRef(module, "ReplayHook", (PyObject *)&ReplayHookType) < 0
        || PyModule_AddObjectRef(module, "TreeRun", (PyObject *)&TreeRunType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
