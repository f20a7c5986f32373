/*
 * graphpickle._speedups: the pickler's per-object hook, in C.
 *
 * The C pickler calls `reducer_override(obj)` for every object that is not an
 * atom, a string, bytes or a builtin container. In Python that call and its
 * dict lookup cost about as much as pickling a small object itself (5-10% of
 * `pickle.dumps` on graphs of small objects). `Dispatch` does the same work
 * as `Pickler.reducer_override` in `_pickler.py`, which stays the reference
 * and the fallback when this module is not built:
 *
 *     handler = handlers.get(type(obj))      # missing: handler = resolve(type(obj))
 *     if handler is None: return NotImplemented
 *     return handler(state, obj)
 *
 * It holds the handler dict, the resolver for types seen for the first time,
 * and the pickler's state object (never the pickler itself, so no reference
 * cycle is made and a pickler is freed by reference counting).
 *
 * For graphpickle/wire.py: `buffer_nbytes(frames)` is the size of each frame,
 * as `[memoryview(f).nbytes for f in frames]` computes it; `frame_table(n,
 * buffers)` builds the header's u64 table of frame sizes in one pass (`pack`);
 * `frames_have_lengths(frames, expected)` compares frame sizes with that table
 * (`unpack`). None creates a memoryview or an int per frame, and a
 * PickleBuffer's size is read without asking its exporter: with 1,000 numpy
 * arrays per message, doing this in Python cost 5-10% of dumps' and loads' time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *handlers; /* dict: type -> handler, or None for "the C pickler's default" */
    PyObject *resolve;  /* callable(type) -> handler or None, called on a dict miss */
    PyObject *state;    /* first argument of every handler */
    vectorcallfunc vectorcall;
} DispatchObject;

static PyObject *
call_handler(DispatchObject *self, PyObject *handler, PyObject *obj)
{
    PyObject *args[2] = {self->state, obj};
    return PyObject_Vectorcall(handler, args, 2, NULL);
}

static PyObject *
dispatch_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    DispatchObject *self = (DispatchObject *)op;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "reducer_override() takes exactly one argument");
        return NULL;
    }
    PyObject *obj = args[0];
    PyObject *type = (PyObject *)Py_TYPE(obj);
    PyObject *handler = PyDict_GetItemWithError(self->handlers, type); /* borrowed */
    if (handler == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        handler = PyObject_CallOneArg(self->resolve, type); /* new reference */
        if (handler == NULL) {
            return NULL;
        }
    }
    else {
        Py_INCREF(handler); /* a handler may change the dict while it runs */
    }
    PyObject *result;
    if (handler == Py_None) {
        result = Py_NewRef(Py_NotImplemented);
    }
    else {
        result = call_handler(self, handler, obj);
    }
    Py_DECREF(handler);
    return result;
}

static PyObject *
dispatch_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *handlers, *resolve, *state;
    static char *kwlist[] = {"handlers", "resolve", "state", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO:Dispatch", kwlist, &PyDict_Type,
                                     &handlers, &resolve, &state)) {
        return NULL;
    }
    if (!PyCallable_Check(resolve)) {
        PyErr_SetString(PyExc_TypeError, "resolve must be callable");
        return NULL;
    }
    DispatchObject *self = (DispatchObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->handlers = Py_NewRef(handlers);
    self->resolve = Py_NewRef(resolve);
    self->state = Py_NewRef(state);
    self->vectorcall = dispatch_vectorcall;
    return (PyObject *)self;
}

static int
dispatch_traverse(DispatchObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->handlers);
    Py_VISIT(self->resolve);
    Py_VISIT(self->state);
    return 0;
}

static int
dispatch_clear(DispatchObject *self)
{
    Py_CLEAR(self->handlers);
    Py_CLEAR(self->resolve);
    Py_CLEAR(self->state);
    return 0;
}

static void
dispatch_dealloc(DispatchObject *self)
{
    PyObject_GC_UnTrack(self);
    dispatch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject DispatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "graphpickle._speedups.Dispatch",
    .tp_doc = PyDoc_STR("Dispatch(handlers, resolve, state): a reducer_override in C."),
    .tp_basicsize = sizeof(DispatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = dispatch_new,
    .tp_dealloc = (destructor)dispatch_dealloc,
    .tp_traverse = (traverseproc)dispatch_traverse,
    .tp_clear = (inquiry)dispatch_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(DispatchObject, vectorcall),
};

/* The length of one contiguous frame; -1 with an exception set if it is none. */
static Py_ssize_t
frame_length(PyObject *frame)
{
    if (PyPickleBuffer_Check(frame)) {
        /* A PickleBuffer already holds its view: no call into the exporter. */
        const Py_buffer *held = PyPickleBuffer_GetBuffer(frame);
        if (held == NULL) { /* released */
            return -1;
        }
        if (!PyBuffer_IsContiguous(held, 'A')) {
            PyErr_SetString(PyExc_BufferError, "a frame is not a contiguous buffer");
            return -1;
        }
        return held->len;
    }
    Py_buffer view;
    /* A frame must be one contiguous block of bytes (C or Fortran order). */
    if (PyObject_GetBuffer(frame, &view, PyBUF_ANY_CONTIGUOUS) < 0) {
        return -1;
    }
    Py_ssize_t length = view.len;
    PyBuffer_Release(&view);
    return length;
}

static PyObject *
buffer_nbytes(PyObject *module, PyObject *frames)
{
    PyObject *fast = PySequence_Fast(frames, "buffer_nbytes() needs a sequence");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    PyObject *sizes = PyList_New(count);
    if (sizes == NULL) {
        Py_DECREF(fast);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t length = frame_length(PySequence_Fast_GET_ITEM(fast, i));
        if (length < 0) {
            goto error;
        }
        PyObject *size = PyLong_FromSsize_t(length);
        if (size == NULL) {
            goto error;
        }
        PyList_SET_ITEM(sizes, i, size);
    }
    Py_DECREF(fast);
    return sizes;

error:
    Py_DECREF(sizes);
    Py_DECREF(fast);
    return NULL;
}

/* frame_table(first_length, buffers): the header's u64 table of frame lengths
 * (little-endian bytes: first_length, then each buffer's size) and the largest
 * buffer size, in one pass over the buffers. */
static PyObject *
frame_table(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "frame_table(first_length, buffers)");
        return NULL;
    }
    unsigned long long first = PyLong_AsUnsignedLongLong(args[0]);
    if (first == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *fast = PySequence_Fast(args[1], "buffers must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    PyObject *table = PyBytes_FromStringAndSize(NULL, (count + 1) * 8);
    if (table == NULL) {
        Py_DECREF(fast);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(table);
    Py_ssize_t largest = 0;
    for (Py_ssize_t i = 0; i <= count; i++) {
        unsigned long long value = first;
        if (i > 0) {
            Py_ssize_t length = frame_length(PySequence_Fast_GET_ITEM(fast, i - 1));
            if (length < 0) {
                Py_DECREF(table);
                Py_DECREF(fast);
                return NULL;
            }
            if (length > largest) {
                largest = length;
            }
            value = (unsigned long long)length;
        }
        for (int byte = 0; byte < 8; byte++) { /* little-endian on any machine */
            out[i * 8 + byte] = (unsigned char)(value >> (8 * byte));
        }
    }
    Py_DECREF(fast);
    return Py_BuildValue("(Nn)", table, largest);
}

/* frames_have_lengths(frames, expected): whether len(frames) == len(expected) and
 * each frame has the length the u64 array `expected` holds (what the header says). */
static PyObject *
frames_have_lengths(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "frames_have_lengths(frames, expected)");
        return NULL;
    }
    Py_buffer expected;
    if (PyObject_GetBuffer(args[1], &expected, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *fast = NULL;
    if (expected.itemsize != 8 || expected.format == NULL
        || (strcmp(expected.format, "Q") != 0 && strcmp(expected.format, "L") != 0)) {
        PyErr_SetString(PyExc_TypeError, "expected must be an array of unsigned 64-bit ints");
        goto done;
    }
    fast = PySequence_Fast(args[0], "frames must be a sequence");
    if (fast == NULL) {
        goto done;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    const unsigned long long *lengths = (const unsigned long long *)expected.buf;
    int same = count == expected.len / 8;
    for (Py_ssize_t i = 0; same && i < count; i++) {
        Py_ssize_t length = frame_length(PySequence_Fast_GET_ITEM(fast, i));
        if (length < 0) {
            goto done;
        }
        same = (unsigned long long)length == lengths[i];
    }
    result = PyBool_FromLong(same);
done:
    Py_XDECREF(fast);
    PyBuffer_Release(&expected);
    return result;
}

static PyMethodDef speedups_methods[] = {
    {"frame_table", (PyCFunction)(void (*)(void))frame_table, METH_FASTCALL,
     PyDoc_STR("frame_table(first_length, buffers): (u64 little-endian table, largest).")},
    {"frames_have_lengths", (PyCFunction)(void (*)(void))frames_have_lengths, METH_FASTCALL,
     PyDoc_STR("frames_have_lengths(frames, expected): the frames match the u64 lengths.")},
    {"buffer_nbytes", buffer_nbytes, METH_O,
     PyDoc_STR("buffer_nbytes(frames): the size in bytes of each contiguous buffer.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "graphpickle._speedups",
    .m_doc = "The pickler's per-object hook, and frame sizes, in C (see _pickler.py and wire.py).",
    .m_size = -1,
    .m_methods = speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&DispatchType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Dispatch", (PyObject *)&DispatchType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
