/*
 * What every compiled part of graphpickle starts with: multi-phase
 * initialisation (PEP 489) of its module, with the VERSION its Python side
 * checks (`_native.load`: an extension built from an older C file, a stale
 * build, is not used). Bump a part's VERSION with any change of behaviour its
 * Python side relies on.
 *
 * Each part keeps process-wide state in static variables, made once (see
 * `once`), and relies on the GIL to guard it. The slots say so: no
 * subinterpreter may load it (3.12+), and a free-threaded interpreter that
 * imports it turns the GIL back on (Py_MOD_GIL_USED, 3.13+; it warns when it
 * does, and GRAPHPICKLE_NO_SPEEDUPS=1 avoids it).
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
#define GRAPHPICKLE_GIL_SLOT {Py_mod_gil, Py_MOD_GIL_USED},
#else
#define GRAPHPICKLE_GIL_SLOT
#endif

/* The slots of a part's module: `exec` fills a new module (it may run again
 * for a module imported anew), then the declarations above. */
#define GRAPHPICKLE_MODULE_SLOTS(name, exec)                  \
    static PyModuleDef_Slot name[] = {                        \
        {Py_mod_exec, (void *)(exec)},                        \
        GRAPHPICKLE_INTERPRETERS_SLOT GRAPHPICKLE_GIL_SLOT {0, NULL}, \
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
