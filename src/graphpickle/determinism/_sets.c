/*
 * graphpickle.determinism._sets: the set detection of deterministic dumps, in
 * C (`sets.py` holds the Python versions).
 *
 * `sets_to_sort(data)` walks a pickle's opcodes and tells whether it writes a
 * set or frozenset of two or more members itself (their order follows the hash
 * seed); `note_set(sink, obj)` is a `persistent_id` that never persists
 * anything and appends each exact set and frozenset it is shown to `sink`.
 * Both are cheap enough to leave the deterministic mode's common path (no
 * set) within a few percent of dumps.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>
#include "../_extension.h"
#include "../_opcodes.h"

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
        unsigned char op = *p;
        p = skip_opcode(p, end);
        if (p == NULL) {
            found = 2;
            continue;
        }
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

static PyMethodDef sets_methods[] = {
    {"sets_to_sort", sets_to_sort, METH_O,
     PyDoc_STR("sets_to_sort(data): the pickle writes a set of 2+ members in hash order.")},
    {"note_set", (PyCFunction)(void (*)(void))note_set, METH_FASTCALL,
     PyDoc_STR("note_set(sink, obj): append obj to sink if it is an exact set or frozenset.")},
    {NULL, NULL, 0, NULL},
};

static int
init_tables(void)
{
    init_opcode_args();
    init_opcode_stack();
    return 0;
}

static int tables_ready;

static int
sets_exec(PyObject *module)
{
    if (once(&tables_ready, init_tables) < 0) {
        return -1;
    }
    return add_version(module, 1); /* VERSION: checked by sets.py */
}

GRAPHPICKLE_MODULE_SLOTS(sets_slots, sets_exec, GRAPHPICKLE_GIL_NOT_USED);

static struct PyModuleDef sets_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "graphpickle.determinism._sets",
    .m_doc = "The set detection of deterministic dumps, in C.",
    .m_size = 0,
    .m_methods = sets_methods,
    .m_slots = sets_slots,
};

PyMODINIT_FUNC
PyInit__sets(void)
{
    return PyModuleDef_Init(&sets_module);
}
