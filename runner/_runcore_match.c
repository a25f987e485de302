/* The fast match of a plain step's inputs (inputs.py fits): the route's fit check first
 * (fit_checks.py: torch's tensor guards made from the last inputs that fitted), the full match
 * when it refuses them, and a check made anew from inputs that fitted in full. It changes nothing
 * but the route's fit check: a check that cannot decide, or raises an Exception, leaves the step to
 * the Python (the overview: _runcore.h). */
#include "_runcore.h"

/* inputs.py fits, for one (name, shape, dtype) expected and its input: of that dtype (the same
 * object), on the CPU (cuda_index None) or CUDA, of that shape (the first input's as the lookup
 * read it), and on CUDA device cuda_index; in the Python's order. 1: it fits; 0: the Python's to
 * judge; -1. */
static int input_fits(PyObject *tensor, PyObject *spec, PyObject *cuda_index, StepInputs *first)
{
    PyObject *shape = PyTuple_GET_ITEM(spec, 1), *dtype = PyTuple_GET_ITEM(spec, 2);
    int fits = -1, differs;                 /* -1 while an error is set */
    PyObject *value = PyObject_GetAttr(tensor, s_dtype);
    if (value == NULL) goto done;
    fits = value == dtype;
    Py_DECREF(value);
    if (!fits) goto done;
    value = PyObject_GetAttr(tensor, cuda_index == Py_None ? s_is_cpu : s_is_cuda);
    fits = value == NULL ? -1 : truth(value);
    Py_XDECREF(value);
    if (fits <= 0) goto done;
    value = tensor == first->tensor && first->shape != NULL ? Py_NewRef(first->shape) : PyObject_GetAttr(tensor, s_shape);
    differs = value == NULL ? -1 : PyObject_RichCompareBool(value, shape, Py_NE);
    Py_XDECREF(value);
    fits = differs < 0 ? -1 : !differs;
    if (fits <= 0 || cuda_index == Py_None) goto done;
    value = PyObject_CallMethodNoArgs(tensor, s_get_device);
    differs = value == NULL ? -1 : PyObject_RichCompareBool(value, cuda_index, Py_NE);
    Py_XDECREF(value);
    fits = differs < 0 ? -1 : !differs;
done:
    return fits < 0 ? judged_by_python() : fits;
}

/* inputs[name] for each expected (name, shape, dtype), in order: what a fit check takes.
 * 1: *given, a new tuple; 0: an input missing, or expected not plain (the Python's); -1. */
static int gather(PyObject *inputs, PyObject *expected, PyObject **given)
{
    Py_ssize_t n = PyTuple_GET_SIZE(expected);
    if ((*given = PyTuple_New(n)) == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(expected, i);
        PyObject *tensor = PyTuple_CheckExact(spec) && PyTuple_GET_SIZE(spec) == 3
                         ? PyDict_GetItemWithError(inputs, PyTuple_GET_ITEM(spec, 0)) : NULL;
        if (tensor == NULL) {
            Py_CLEAR(*given);
            return judged_by_python();
        }
        PyTuple_SET_ITEM(*given, i, Py_NewRef(tensor));
    }
    return 1;
}

/* check(*given): 1 when it accepts them; 0 when it refuses them or raises an Exception (the full
 * match then judges); -1. */
static int accepted(PyObject *check, PyObject *given)
{
    PyObject *answer = PyObject_Call(check, given, NULL);
    int yes = answer == Py_True;
    Py_XDECREF(answer);
    return answer == NULL ? judged_by_python() : yes;
}

/* The route's fit check made anew from inputs that fitted in full: later steps with inputs like
 * them take the check alone. A maker that fails leaves the route as it was (matched in full). */
static int remake_fit_check(PyObject *route, PyObject *given)
{
    PyObject *check = PyObject_CallOneArg(make_fit_check, given);
    int done = check == NULL ? -1 : PyObject_SetAttr(route, s_fit_check, check);
    Py_XDECREF(check);
    return done < 0 ? judged_by_python() : 0;
}

/* inputs.py fits(inputs, route.expected, route.cuda_index): exactly the expected inputs, each
 * fitting. The route's fit check decides first (fit_checks.py: it accepts only inputs like those
 * that last fitted); the full match when it refuses them, and then a check made from them. Inputs a
 * check accepted are kept in *first (its expected and given, new references) for the copies. */
int inputs_fit(PyObject *inputs, PyObject *route, StepInputs *first)
{
    PyObject *expected = route_field(route, F_EXPECTED), *given = NULL;
    PyObject *cuda_index = expected == NULL ? NULL : route_field(route, F_CUDA_INDEX);
    PyObject *check = cuda_index == NULL ? NULL : route_field(route, F_FIT_CHECK);
    int fits = check == NULL ? judged_by_python()
             : PyTuple_CheckExact(expected) && PyTuple_GET_SIZE(expected) == PyDict_GET_SIZE(inputs);
    if (fits > 0) fits = gather(inputs, expected, &given);
    int checked = fits > 0 && check != Py_None ? accepted(check, given) : 0;
    if (checked != 0) {
        fits = checked;
    } else {
        for (Py_ssize_t i = 0; fits > 0 && i < PyTuple_GET_SIZE(expected); i++)
            fits = input_fits(PyTuple_GET_ITEM(given, i), PyTuple_GET_ITEM(expected, i), cuda_index, first);
        if (fits > 0 && make_fit_check != Py_None && remake_fit_check(route, given) < 0) fits = -1;
    }
    if (fits > 0 && checked > 0) {          /* kept for the copies: the check ran no Python of the program's */
        first->expected = expected;
        first->given = given;
    } else {
        Py_XDECREF(expected);
        Py_XDECREF(given);
    }
    Py_XDECREF(cuda_index);
    Py_XDECREF(check);
    return fits;
}
