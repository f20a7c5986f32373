/*
 * graphpickle.wire._frames: the wire's frame sizes, in C (`frames.py` holds
 * the Python versions, with the same results).
 *
 * `buffer_nbytes(frames)` is the size of each frame, as
 * `[memoryview(f).nbytes for f in frames]` computes it; `frame_table(n,
 * buffers)` builds the header's u64 table of frame sizes in one pass (`pack`);
 * `frames_have_lengths(frames, expected)` compares frame sizes with that table
 * (`unpack`); `frame_views(view, start, lengths)` slices a contiguous message
 * into its frames (`unpack_bytes`). None creates an int per frame, and a
 * PickleBuffer's size is read without asking its exporter: with 1,000 numpy
 * arrays per message, doing this in Python cost 5-10% of dumps' and loads' time.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

#include "../_extension.h"

/* The length of one contiguous frame; -1 with an exception set if it is none. */
static Py_ssize_t
frame_length(PyObject *frame)
{
#ifndef Py_GIL_DISABLED /* (free-threaded: another thread may release the buffer meanwhile) */
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
#endif
    Py_buffer view;
    /* A frame must be one contiguous block of bytes (C or Fortran order). */
    if (PyObject_GetBuffer(frame, &view, PyBUF_ANY_CONTIGUOUS) < 0) {
        return -1;
    }
    Py_ssize_t length = view.len;
    PyBuffer_Release(&view);
    return length;
}

/* The items of `seq` (PySequence_Fast). On a free-threaded build a list is
 * copied to a tuple first, under the list's lock: another thread changing the
 * list meanwhile cannot free an item this call reads. */
static PyObject *
items_of(PyObject *seq, const char *message)
{
    PyObject *fast = PySequence_Fast(seq, message);
#ifdef Py_GIL_DISABLED
    if (fast != NULL && PyList_CheckExact(fast)) {
        Py_SETREF(fast, PyList_AsTuple(fast));
    }
#endif
    return fast;
}

static PyObject *
buffer_nbytes(PyObject *module, PyObject *frames)
{
    PyObject *fast = items_of(frames, "buffer_nbytes() needs a sequence");
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
    PyObject *fast = items_of(args[1], "buffers must be a sequence");
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
    fast = items_of(args[0], "frames must be a sequence");
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

static PyMethodDef frames_methods[] = {
    {"frame_views", (PyCFunction)(void (*)(void))frame_views, METH_FASTCALL,
     PyDoc_STR("frame_views(view, start, lengths): (slices of view, end offset).")},
    {"frame_table", (PyCFunction)(void (*)(void))frame_table, METH_FASTCALL,
     PyDoc_STR("frame_table(first_length, buffers): (u64 little-endian table, largest).")},
    {"frames_have_lengths", (PyCFunction)(void (*)(void))frames_have_lengths, METH_FASTCALL,
     PyDoc_STR("frames_have_lengths(frames, expected): the frames match the u64 lengths.")},
    {"buffer_nbytes", buffer_nbytes, METH_O,
     PyDoc_STR("buffer_nbytes(frames): the size in bytes of each contiguous buffer.")},
    {NULL, NULL, 0, NULL},
};

static int
frames_exec(PyObject *module)
{
    return add_version(module, 1); /* VERSION: checked by frames.py */
}

GRAPHPICKLE_MODULE_SLOTS(frames_slots, frames_exec, GRAPHPICKLE_GIL_NOT_USED);

static struct PyModuleDef frames_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "graphpickle.wire._frames",
    .m_doc = "The wire's frame sizes, in C.",
    .m_size = 0,
    .m_methods = frames_methods,
    .m_slots = frames_slots,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    return PyModuleDef_Init(&frames_module);
}
