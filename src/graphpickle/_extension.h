/*
 * What every compiled part of graphpickle starts with: its module, made with
 * the VERSION its Python side checks (`_native.load`: an extension built from
 * an older C file, a stale build, is not used). Bump a part's VERSION with any
 * change of behaviour its Python side relies on.
 */
#ifndef GRAPHPICKLE_EXTENSION_H
#define GRAPHPICKLE_EXTENSION_H

#include <Python.h>

/* A new module from `def`, with its VERSION; NULL with an exception set. */
static PyObject *
create_module(PyModuleDef *def, int version)
{
    PyObject *module = PyModule_Create(def);
    if (module != NULL && PyModule_AddIntConstant(module, "VERSION", version) < 0) {
        Py_CLEAR(module);
    }
    return module;
}

#endif /* GRAPHPICKLE_EXTENSION_H */
