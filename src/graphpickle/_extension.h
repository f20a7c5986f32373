/*
 * What every compiled part of graphpickle starts with: multi-phase
 * initialisation (PEP 489) of its module, with the VERSION its Python side
 * checks (`_native.load`: an extension built from an older C file, a stale
 * build, is not used). Bump a part's VERSION with any change of behaviour its
 * Python side relies on.
 *
 * What a part keeps between calls lives in its module state (PEP 630), made
 * by `exec` for each module object: `_speedups`'s caches and its heap types.
 * Static variables hold only constant tables (opcode layouts, a hash seed),
 * made once (see `once`) while the first module is imported (under the import
 * lock) and never changed after, but for what a dict watcher's callback, which
 * reaches no module state, must keep (_speedups, 3.12+: counts of events). No subinterpreter may load a part (3.12+):
 * graphpickle's Python side is not checked there. Whether a part needs the
 * GIL is said by its slots (Py_mod_gil, 3.13+):
 * - GRAPHPICKLE_GIL_NOT_USED: it reads its arguments through buffers it holds
 *   or items it owns (a list is copied under its lock on a free-threaded
 *   build), and shares nothing between calls but the constant tables (_sets,
 *   _values, _frames);
 * - GRAPHPICKLE_GIL_USED: it keeps caches between calls, which the GIL guards
 *   (_speedups: see its file for what a free-threaded build would still need).
 *   `_native.load` does not import such a part on a free-threaded interpreter
 *   whose GIL is off (its Python version runs), so importing graphpickle never
 *   turns the GIL back on.
 */
#ifndef GRAPHPICKLE_EXTENSION_H
#define GRAPHPICKLE_EXTENSION_H

#include <Python.h>

#if PY_VERSION_HEX >= 0x030C0000
#define GRAPHPICKLE_INTERPRETERS_SLOT \
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#else
#define GRAPHPICKLE_INTERPRETERS_SLOT
#endif
#if PY_VERSION_HEX >= 0x030D0000
#define GRAPHPICKLE_GIL_USED {Py_mod_gil, Py_MOD_GIL_USED},
#define GRAPHPICKLE_GIL_NOT_USED {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#else
#define GRAPHPICKLE_GIL_USED
#define GRAPHPICKLE_GIL_NOT_USED
#endif

/* The slots of a part's module: `exec` fills a new module (it may run again
 * for a module imported anew), then the declarations above; `gil` is
 * GRAPHPICKLE_GIL_USED or GRAPHPICKLE_GIL_NOT_USED (`_native.GIL_FREE` lists
 * the parts that say NOT_USED). */
#define GRAPHPICKLE_MODULE_SLOTS(name, exec, gil)             \
    static PyModuleDef_Slot name[] = {                        \
        {Py_mod_exec, (void *)(exec)},                        \
        GRAPHPICKLE_INTERPRETERS_SLOT gil {0, NULL},          \
    }

/* Run `init` the first time only (the process-wide state it makes is shared by
 * every module object made from the part): 0, or -1 with an exception set. */
static inline int
once(int *done, int (*init)(void))
{
    if (*done) {
        return 0;
    }
    if (init() < 0) {
        return -1;
    }
    *done = 1;
    return 0;
}

/* Add the part's VERSION to a new module: 0, or -1 with an exception set. */
static inline int
add_version(PyObject *module, int version)
{
    return PyModule_AddIntConstant(module, "VERSION", version);
}

#endif /* GRAPHPICKLE_EXTENSION_H */
