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
 * (`unpack`); `frame_views(view, start, lengths)` slices a contiguous message
 * into its frames (`unpack_bytes`). None creates an int per frame, and a
 * PickleBuffer's size is read without asking its exporter: with 1,000 numpy
 * arrays per message, doing this in Python cost 5-10% of dumps' and loads' time.
 *
 * For graphpickle/determinism.py: `sets_to_sort(data)` walks a pickle's opcodes
 * and tells whether it writes a set or frozenset of two or more members itself
 * (their order follows the hash seed); `note_set(sink, obj)` is
 * a `persistent_id` that never persists anything and appends each exact set
 * and frozenset it is shown to `sink`. Both are cheap enough to leave the
 * deterministic mode's common path (no set) within a few percent of dumps.
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
        /* No strides, or one dimension of adjacent items: contiguous, without
         * PyBuffer_IsContiguous's general walk (a third of unpack's checks). */
        int simple = held->suboffsets == NULL
                     && (held->strides == NULL
                         || (held->ndim == 1 && held->strides[0] == held->itemsize));
        if (!simple && !PyBuffer_IsContiguous(held, 'A')) {
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

/* How a pickle opcode's argument is laid out (see pickletools.py). Values 0-8
 * are a fixed number of bytes; the others are length-prefixed data or lines. */
enum {
    ARG_UNKNOWN = -1,
    ARG_LEN1 = 101, /* 1-byte length, then that many bytes */
    ARG_LEN4 = 104, /* 4-byte little-endian length (signed for BINSTRING and LONG4) */
    ARG_LEN8 = 108, /* 8-byte little-endian length */
    ARG_LINE = 120, /* text up to a newline */
    ARG_LINE2 = 121 /* two such lines (GLOBAL, INST) */
};

static signed char opcode_arg[256];

static void
init_opcode_args(void)
{
    memset(opcode_arg, ARG_UNKNOWN, sizeof(opcode_arg));
    static const char no_arg[] = "(.012NQRabd}el]ostu)";
    for (const char *c = no_arg; *c; c++) {
        opcode_arg[(unsigned char)*c] = 0;
    }
    static const unsigned char no_arg_binary[] = {
        0x81, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x97, 0x98};
    for (size_t i = 0; i < sizeof(no_arg_binary); i++) {
        opcode_arg[no_arg_binary[i]] = 0;
    }
    opcode_arg['K'] = opcode_arg['h'] = opcode_arg['q'] = opcode_arg[0x80] = opcode_arg[0x82] = 1;
    opcode_arg['M'] = opcode_arg[0x83] = 2;
    opcode_arg['J'] = opcode_arg['j'] = opcode_arg['r'] = opcode_arg[0x84] = 4;
    opcode_arg['G'] = opcode_arg[0x95] = 8; /* BINFLOAT, FRAME (its content is opcodes) */
    opcode_arg['U'] = opcode_arg['C'] = opcode_arg[0x8c] = opcode_arg[0x8a] = ARG_LEN1;
    opcode_arg['T'] = opcode_arg['B'] = opcode_arg['X'] = opcode_arg[0x8b] = ARG_LEN4;
    opcode_arg[0x8e] = opcode_arg[0x8d] = opcode_arg[0x96] = ARG_LEN8;
    static const char line_arg[] = "ILFSVPgp";
    for (const char *c = line_arg; *c; c++) {
        opcode_arg[(unsigned char)*c] = ARG_LINE;
    }
    opcode_arg['c'] = opcode_arg['i'] = ARG_LINE2;
}

static unsigned long long
read_le(const unsigned char *p, int size)
{
    unsigned long long value = 0;
    for (int i = size - 1; i >= 0; i--) {
        value = (value << 8) | p[i];
    }
    return value;
}

/* Skip one newline-terminated argument; NULL if there is no newline. */
static const unsigned char *
skip_line(const unsigned char *p, const unsigned char *end)
{
    const unsigned char *newline = memchr(p, '\n', (size_t)(end - p));
    return newline == NULL ? NULL : newline + 1;
}

/* frame_views(view, start, lengths): ([view[start:start+lengths[0]], ...], end),
 * slicing the 1-D memoryview `view` into consecutive frames of the u64 array
 * `lengths` (unpack_bytes), and stopping early at a frame the view is too short
 * to hold: the caller compares the count and `end` with what it expected. */
static PyObject *
frame_views(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyMemoryView_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "frame_views(view: memoryview, start, lengths)");
        return NULL;
    }
    PyObject *view = args[0];
    Py_ssize_t size = PyMemoryView_GET_BUFFER(view)->len;
    Py_ssize_t end = PyLong_AsSsize_t(args[1]);
    if (end == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer lengths;
    if (PyObject_GetBuffer(args[2], &lengths, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    PyObject *views = NULL;
    if (lengths.itemsize != 8 || lengths.format == NULL
        || (strcmp(lengths.format, "Q") != 0 && strcmp(lengths.format, "L") != 0)) {
        PyErr_SetString(PyExc_TypeError, "lengths must be an array of unsigned 64-bit ints");
        goto done;
    }
    Py_ssize_t count = lengths.len / 8;
    views = PyList_New(0);
    if (views == NULL) {
        goto done;
    }
    const unsigned long long *declared = (const unsigned long long *)lengths.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (end < 0 || end > size || declared[i] > (unsigned long long)(size - end)) {
            break; /* truncated: the caller sees fewer views than lengths */
        }
        PyObject *frame = PySequence_GetSlice(view, end, end + (Py_ssize_t)declared[i]);
        if (frame == NULL || PyList_Append(views, frame) < 0) {
            Py_XDECREF(frame);
            Py_CLEAR(views);
            goto done;
        }
        Py_DECREF(frame);
        end += (Py_ssize_t)declared[i];
    }
done:
    PyBuffer_Release(&lengths);
    if (views == NULL) {
        return NULL;
    }
    return Py_BuildValue("(Nn)", views, end);
}

/* What each opcode does to the unpickler's stack: STACK_n pushes n more items
 * than it pops (n may be negative); the others work with marks. */
enum {
    STACK_MARK = 100,         /* MARK */
    STACK_TO_MARK_PUSH1 = 101, /* pop to the mark, push one (TUPLE, LIST, DICT, FROZENSET, OBJ, INST) */
    STACK_TO_MARK = 102,      /* pop to the mark (APPENDS, SETITEMS, ADDITEMS, POP_MARK) */
    STACK_POP = 103,          /* POP: one item, or the mark when none is above it */
    STACK_STOP = 104
};

static signed char opcode_stack[256];

static void
init_opcode_stack(void)
{
    static const char push1[] = "NIJKLMFGSTUVXBChgjcP2)]}";
    for (const char *c = push1; *c; c++) {
        opcode_stack[(unsigned char)*c] = 1;
    }
    static const unsigned char push1_binary[] = {
        0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x96, 0x97, 0x82, 0x83, 0x84};
    for (size_t i = 0; i < sizeof(push1_binary); i++) {
        opcode_stack[push1_binary[i]] = 1;
    }
    opcode_stack['a'] = opcode_stack['b'] = opcode_stack['R'] = opcode_stack[0x81] = -1;
    opcode_stack[0x93] = opcode_stack[0x86] = -1; /* STACK_GLOBAL, TUPLE2 */
    opcode_stack['s'] = opcode_stack[0x92] = opcode_stack[0x87] = -2; /* SETITEM, NEWOBJ_EX, TUPLE3 */
    /* 0 for PROTO, FRAME, MEMOIZE, PUT & co, TUPLE1, BINPERSID, READONLY_BUFFER */
    opcode_stack['('] = STACK_MARK;
    opcode_stack['t'] = opcode_stack['l'] = opcode_stack['d'] = opcode_stack[0x91] = STACK_TO_MARK_PUSH1;
    opcode_stack['o'] = opcode_stack['i'] = STACK_TO_MARK_PUSH1;
    opcode_stack['e'] = opcode_stack['u'] = opcode_stack[0x90] = opcode_stack['1'] = STACK_TO_MARK;
    opcode_stack['0'] = STACK_POP;
    opcode_stack['.'] = STACK_STOP;
}

/* sets_to_sort(data): whether the pickle writes a set or frozenset of two or
 * more members itself (with EMPTY_SET and ADDITEMS, or FROZENSET): their order
 * is the hash order. It follows the unpickler's stack, counting the items above
 * each mark, to know how many members each ADDITEMS or FROZENSET takes, and
 * stops at the first such set. ValueError if it meets the end of the data, or
 * something that is not a pickle opcode, before STOP or such a set. */
static PyObject *
sets_to_sort(PyObject *module, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *p = view.buf;
    const unsigned char *end = p + view.len;
    /* above[d]: items above the d-th mark (above[0]: above the stack's bottom). */
    Py_ssize_t capacity = 64, depth = 0;
    Py_ssize_t *above = PyMem_Malloc(capacity * sizeof(Py_ssize_t));
    if (above == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    above[0] = 0;
    int found = -1; /* -1: walking, 0: reached STOP, 1: found a set to sort, 2: bad data */
    while (found < 0) {
        if (p >= end) {
            found = 2;
            break;
        }
        unsigned char op = *p++;
        int kind = opcode_arg[op];
        unsigned long long length = 0;
        switch (kind) {
        case ARG_UNKNOWN:
            found = 2;
            continue;
        case ARG_LEN1:
        case ARG_LEN4:
        case ARG_LEN8: {
            int size = kind - 100;
            if (end - p < size) {
                found = 2;
                continue;
            }
            length = read_le(p, size);
            if ((op == 'T' || op == 0x8b) && (length & 0x80000000ULL)) { /* signed, negative */
                found = 2;
                continue;
            }
            p += size;
            break;
        }
        case ARG_LINE:
        case ARG_LINE2:
            p = skip_line(p, end);
            if (p != NULL && kind == ARG_LINE2) {
                p = skip_line(p, end);
            }
            break;
        default:
            length = (unsigned long long)kind;
        }
        if (p == NULL || length > (unsigned long long)(end - p)) {
            found = 2;
            continue;
        }
        p += length;
        int effect = opcode_stack[op];
        switch (effect) {
        case STACK_MARK:
            if (++depth == capacity) {
                capacity *= 2;
                Py_ssize_t *grown = PyMem_Realloc(above, capacity * sizeof(Py_ssize_t));
                if (grown == NULL) {
                    PyMem_Free(above);
                    PyBuffer_Release(&view);
                    return PyErr_NoMemory();
                }
                above = grown;
            }
            above[depth] = 0;
            break;
        case STACK_TO_MARK_PUSH1:
        case STACK_TO_MARK:
            if (depth == 0) {
                found = 2;
                break;
            }
            if ((op == 0x90 || op == 0x91) && above[depth] >= 2) { /* ADDITEMS, FROZENSET */
                found = 1;
            }
            depth--;
            above[depth] += effect == STACK_TO_MARK_PUSH1;
            break;
        case STACK_POP:
            if (above[depth] > 0) {
                above[depth]--;
            }
            else if (depth > 0) {
                depth--;
            }
            else {
                found = 2;
            }
            break;
        case STACK_STOP:
            found = depth == 0 && above[0] == 1 ? 0 : 2;
            break;
        default:
            above[depth] += effect;
            if (above[depth] < 0) {
                found = 2;
            }
        }
    }
    PyMem_Free(above);
    PyBuffer_Release(&view);
    if (found == 2) {
        PyErr_SetString(PyExc_ValueError, "sets_to_sort() needs a whole, valid pickle");
        return NULL;
    }
    return PyBool_FromLong(found);
}

/* note_set(sink, obj): append obj to the list sink if it is an exact set or
 * frozenset; return None (used as a persistent_id that persists nothing). */
static PyObject *
note_set(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "note_set(sink: list, obj)");
        return NULL;
    }
    PyTypeObject *type = Py_TYPE(args[1]);
    if ((type == &PySet_Type || type == &PyFrozenSet_Type) && PyList_Append(args[0], args[1]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef speedups_methods[] = {
    {"frame_views", (PyCFunction)(void (*)(void))frame_views, METH_FASTCALL,
     PyDoc_STR("frame_views(view, start, lengths): (slices of view, end offset).")},
    {"sets_to_sort", sets_to_sort, METH_O,
     PyDoc_STR("sets_to_sort(data): the pickle writes a set of 2+ members in hash order.")},
    {"note_set", (PyCFunction)(void (*)(void))note_set, METH_FASTCALL,
     PyDoc_STR("note_set(sink, obj): append obj to sink if it is an exact set or frozenset.")},
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
    .m_doc = "The pickler's per-object hook, frame sizes and set detection, in C.",
    .m_size = -1,
    .m_methods = speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&DispatchType) < 0) {
        return NULL;
    }
    init_opcode_args();
    init_opcode_stack();
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
