/*
 * graphpickle.core._speedups: the pickler's per-object hook, dumps and loads
 * for small messages, and the checks behind remembered reductions, in C.
 *
 * The C pickler calls `reducer_override(obj)` for every object that is not an
 * atom, a string, bytes or a builtin container. In Python that call and its
 * dict lookup cost about as much as pickling a small object itself (5-10% of
 * `pickle.dumps` on graphs of small objects). `Dispatch` does the same work
 * as `Pickler.reducer_override` in `pickler.py`, which stays the reference
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
 * Beside it: `Dumper`/`Loader` (`dumps`/`loads` on pooled picklers, see
 * `pickler.py`), `remember_by_reference` (`reducers.py`), `function_snapshot`,
 * `same_objects` and `same_modules` (what a remembered by-value reduction
 * depends on, `snapshots.py`) and `bytearray8_overruns` (`overrun.py`). Each has its
 * Python version in the module named, with the same results.
 *
 * Threads. Its tables live in module state (SpeedupsState); an item of a table
 * is read as a new reference (dict_get_ref), and the Dumper's pool and counter
 * change only in a critical section on it. The module still declares that it
 * needs the GIL (Py_MOD_GIL_USED), because two things are safe only under it:
 * set_remembered, set_by_reference_policy and set_session_reductions replace
 * what the hook reads without a lock, and the hook reads a function's and a
 * class's fields (__module__, __qualname__, globals, closure, __dict__) in
 * place, which another thread may assign, freeing the old value, between the
 * read and its use. On a free-threaded interpreter without the GIL,
 * `_native.load` does not import it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>
#include "../_extension.h"
#include "../_opcodes.h"

#if PY_VERSION_HEX < 0x030C0000 /* the names 3.12 gave structmember.h's */
#include <structmember.h>
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif
#if PY_VERSION_HEX < 0x030D0000 /* before 3.13 there is always a GIL to serialise them */
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* Every type here is a heap type of its module (PyType_FromModuleAndSpec), not
 * subclassable, so that Py_TYPE(obj) of one of its objects is that very type,
 * whose module state it reads; none can be changed from Python. */
#define TYPE_FLAGS (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE)


/* The slot layouts make_function reads (blocks._LAYOUTS: two), and the slots
 * it reads apart from the others, in this order. */
#define MAX_LAYOUTS 4
#define LAYOUT_APART 3
static const char *APART_SLOTS[LAYOUT_APART] = {"__globals__", "__closure__", "_cloudpickle_submodules"};
enum { APART_GLOBALS, APART_CLOSURE, APART_SUBMODULES };

/* Everything the module keeps between calls, in its module state (PEP 630): a
 * module object made anew from this file (a second import, another
 * interpreter) starts with tables of its own. An object of one of its types
 * holds a pointer to this state, which lives as long as the object: the object
 * holds its type, and a heap type holds its module. */
typedef struct {
    PyTypeObject *dispatch_type, *sink_type, *dumper_type, *loader_type;
    PyObject *str_module, *str_by_value, *str_memo, *str_join, *str_qualname;
    PyObject *str_protocol, *str_buffer_callback, *str_deterministic, *str_buffers, *str_blocks;
    PyObject *str_fix_imports, *str_encoding, *str_errors, *str_speedups, *str_buffer;
    PyObject *str_generation, *str_globals_ref, *str_package, *str_name, *str_path, *str_file;
    PyObject *str_locals, *str_lambda, *main_modules, *str_modules, *sys_dict;
    PyObject *str_builtins, *str_dict, *str_update, *str_closure, *str_cell_contents, *str_held;
    PyObject *str_import, *builtins_dict, *str_spec;
    PyObject *empty_bytes, *empty_dict;
    /* Importable functions and classes, remembered once the Python policy
     * found them importable (remember_by_reference): object -> (module, module
     * name, qualified name). A hit still checks, in a few dict lookups, what the
     * policy checked: its module is not registered for pickling by value (nor
     * under a registered package), sys.modules still holds that module under
     * that name, and the module holds the object under its (undotted) qualified
     * name; a rebound global, a reloaded module or a changed
     * __module__/__qualname__ misses, and the Python policy decides again. The
     * registry is read at each hit (registered_by_value), whatever it held when
     * the entry was made. Only exact functions and classes of plain metaclasses
     * (is_plain_class: identity hashing, type's attributes) are remembered, at
     * most MAX_BY_REFERENCE of them. */
    PyObject *by_reference;
    /* policy.REGISTRIES: the sets of module names registered by value
     * (cloudpickle's, and those an integration adds, such as Ray's vendored
     * cloudpickle's), read live: see registered_by_value. */
    PyObject *by_value_registries;
    /* A dotted module name's parents ("a.b.c": ("a.b", "a")), the other names
     * policy.is_registered looks up: made once per name (they depend on its text
     * alone, never on the registry), at most MAX_PARENT_NAMES names. */
    PyObject *parent_names;
    /* The policy's handlers of functions and classes: another handler (a
     * reducer registered for all functions) is never bypassed. */
    PyObject *function_handler, *class_handler;
    /* The policy's handler of modules, and cloudpickle's subimport: an exact
     * module that sys.modules holds under its __name__, not registered by value
     * (nor under a registered package), is answered (subimport, (name,)) as
     * the handler answers it. */
    PyObject *module_handler, *subimport;
    /* What the hook answers without calling a handler, set by set_remembered
     * (reducers.py); a hit is the handler's answer, and a miss asks it:
     * - builtin_types maps the classes of `types` that are not importable by
     *   name to their constant reduction (every code object's payload names
     *   types.CodeType);
     * - codes maps id(code) to (code, reduction, its code block's or None), read in default mode
     *   (the code handler answers otherwise);
     * - functions holds the by-value functions remembered between payloads
     *   (reducers._functions: id -> an entry laid out as ENTRY_FIELDS),
     *   captures_globals the globals of core/captures.py (its _generation),
     *   missing_marker what a snapshot found missing. */
    PyObject *code_handler, *builtin_types, *codes;
    PyObject *functions, *captures_globals, *missing_marker;
    /* blocks.make_function's: cloudpickle's __builtins__, the slot layouts, the
     * Python function (anything unusual goes to it), and where each layout
     * has the three slots it reads apart (-1: none, SystemError) */
    PyObject *function_builtins, *function_layouts, *make_function_slow;
    Py_ssize_t layout_slots[MAX_LAYOUTS][LAYOUT_APART];
    /* blocks.function_ref's: connection.RECEIVER (a context variable), and the
     * Python function (a miss, or anything unusual, goes to it: it says what
     * is wrong) */
    PyObject *receiver_var, *receiver_type, *function_ref_slow;
    /* On a connection (a dump whose `blocks` holds a session), set by
     * set_session_reductions: reducers._block_reduction(state, func, entry),
     * called for a remembered function once its snapshot is checked (it
     * writes the function block or its digest), and blocks.subimport, which
     * names modules there instead of cloudpickle's subimport. What
     * held_function_reduction reads to answer as _block_reduction does where
     * the receiver holds the block: reducers._function_blocks,
     * blocks.HeldGlobals, connection.Session, blocks.function_ref (or NULL,
     * with caching off: the Python function answers). */
    PyObject *session_reduction, *session_subimport;
    PyObject *function_blocks, *held_globals_type, *session_type, *function_ref_object;
    PyObject *str_sent_as, *str_sender, *str_carried;
    /* sys.modules's keys and values, flat (modules_items), as `modules_dict`
     * held them at `modules_stamp`: its version tag (3.11), or the count of
     * events of the dicts watched as sys.modules (3.12+: `modules_watcher`, or
     * -1 if none could be had). A snapshot that *is* this tuple is sys.modules's
     * while the dict is the same and unchanged since: same_modules needs no walk. */
    PyObject *modules_dict, *modules_items;
    uint64_t modules_stamp;
    int modules_watcher;
    /* The dict watcher of the dicts held parts' probes read whole (3.12+:
     * held_watch; -1 if none could be had, and on 3.11), and a dict only our
     * two watchers watch, which a check changes to know that one still counts. */
    int held_watcher;
    PyObject *watch_sentinel;
} SpeedupsState;

/* Every field of SpeedupsState, for the module's traverse and clear. */
#define FOR_EACH_STATE_FIELD(DO)                                                                  \
    DO(dispatch_type) DO(sink_type) DO(dumper_type) DO(loader_type) DO(str_module)               \
    DO(str_by_value) DO(str_memo) DO(str_join) DO(str_qualname) DO(str_protocol)                 \
    DO(str_buffer_callback) DO(str_deterministic) DO(str_buffers) DO(str_blocks) DO(str_fix_imports) \
    DO(str_encoding) DO(str_errors) DO(str_speedups) DO(str_buffer) DO(str_generation)           \
    DO(str_globals_ref) DO(str_package) DO(str_name) DO(str_path) DO(str_file) DO(str_locals)    \
    DO(str_lambda) DO(main_modules) DO(str_modules) DO(sys_dict) DO(empty_bytes)                  \
    DO(str_builtins) DO(str_dict) DO(str_update) DO(str_closure) DO(str_cell_contents)           \
    DO(str_held) DO(str_import) DO(builtins_dict) DO(receiver_var) DO(receiver_type)              \
    DO(function_ref_slow) DO(function_blocks) DO(held_globals_type) DO(session_type)             \
    DO(function_ref_object) DO(str_sent_as) DO(str_sender) DO(str_carried)                       \
    DO(empty_dict) DO(by_reference) DO(by_value_registries) DO(parent_names)                     \
    DO(function_handler) DO(class_handler) DO(module_handler) DO(subimport)                       \
    DO(code_handler) DO(builtin_types) DO(codes) DO(functions) DO(captures_globals)              \
    DO(function_builtins) DO(function_layouts) DO(make_function_slow)                             \
    DO(session_reduction) DO(session_subimport)                                                   \
    DO(missing_marker) DO(modules_dict) DO(modules_items) DO(str_spec) DO(watch_sentinel)

static inline SpeedupsState *
module_state(PyObject *module)
{
    return (SpeedupsState *)PyModule_GetState(module);
}

typedef struct {
    PyObject_HEAD
    PyObject *handlers; /* dict: type -> handler, or None for "the C pickler's default" */
    PyObject *resolve;  /* callable(type) -> handler or None, called on a dict miss */
    PyObject *state;    /* first argument of every handler */
    SpeedupsState *st;  /* its module's */
    vectorcallfunc vectorcall;
    int touched; /* a handler ran since the last reset: the state may have changed */
} DispatchObject;

static PyObject *
call_handler(DispatchObject *self, PyObject *handler, PyObject *obj)
{
    PyObject *args[2] = {self->state, obj};
    return PyObject_Vectorcall(handler, args, 2, NULL);
}

#define MAX_BY_REFERENCE 4096

/* A class whose metaclass hashes, compares and reads attributes as `type` does
 * (ABCMeta, numpy's DTypeMeta): its identity and its names are type's. */
static int
is_plain_class(PyObject *obj)
{
    PyTypeObject *meta = Py_TYPE(obj);
    if (meta == &PyType_Type) {
        return 1;
    }
    return PyType_Check(obj) && meta->tp_hash == PyType_Type.tp_hash
           && meta->tp_richcompare == PyType_Type.tp_richcompare
           && meta->tp_getattro == PyType_Type.tp_getattro;
}

/* dict[key] as a new reference in *value (NULL if missing): 1 found, 0
 * missing, -1 with an exception set. A borrowed item could be dropped by
 * Python code run before its use, or by another thread on a free-threaded
 * build: every table this module shares between calls is read this way. */
static int
dict_get_ref(PyObject *dict, PyObject *key, PyObject **value)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyDict_GetItemRef(dict, key, value);
#else
    *value = Py_XNewRef(PyDict_GetItemWithError(dict, key));
    return *value != NULL ? 1 : (PyErr_Occurred() ? -1 : 0);
#endif
}

/* obj's current module name and qualified name, as new references: 1; 0 if
 * they cannot be read without Python code (or a lookup failed); for a static
 * type (whose names cannot change), the names in `remembered` (a tuple), or
 * none if there is no such tuple yet. */
static int
current_names(SpeedupsState *st, PyObject *obj, PyObject *remembered, PyObject **module_name,
              PyObject **qualname)
{
    *module_name = *qualname = NULL;
    if (Py_IS_TYPE(obj, &PyFunction_Type)) {
        *module_name = Py_XNewRef(((PyFunctionObject *)obj)->func_module);
        *qualname = Py_XNewRef(((PyFunctionObject *)obj)->func_qualname);
    }
    else if (is_plain_class(obj) && (((PyTypeObject *)obj)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        PyObject *type_dict = ((PyTypeObject *)obj)->tp_dict;
        if (type_dict != NULL && dict_get_ref(type_dict, st->str_module, module_name) >= 0) {
            *qualname = Py_XNewRef(((PyHeapTypeObject *)obj)->ht_qualname);
        }
    }
    else if (is_plain_class(obj) && remembered != NULL) {
        *module_name = Py_NewRef(PyTuple_GET_ITEM(remembered, 1));
        *qualname = Py_NewRef(PyTuple_GET_ITEM(remembered, 2));
    }
    if (*module_name != NULL && PyUnicode_CheckExact(*module_name) && *qualname != NULL
        && PyUnicode_CheckExact(*qualname)) {
        return 1;
    }
    Py_CLEAR(*module_name);
    Py_CLEAR(*qualname);
    return 0;
}

/* sys.modules as the policy and cloudpickle read it (the attribute, which a
 * program may rebind), if it is an exact dict: borrowed (sys holds it while no
 * Python code runs), or NULL. */
static PyObject *
sys_modules(SpeedupsState *st)
{
    /* (sys's dict, held: PySys_GetObject would make the key anew at each call) */
    PyObject *modules = PyDict_GetItemWithError(st->sys_dict, st->str_modules);
    return modules != NULL && PyDict_CheckExact(modules) ? modules : NULL;
}

#define MAX_PARENT_NAMES 4096

/* Whether `name` is in one of the registries: 1, 0, or -1 with an exception
 * set; 1 too for a registry that is not an exact set (the policy decides). The
 * list and each set are held during the lookup: an item that is not a str may
 * compare in Python, which may change either. */
static int
in_a_registry(SpeedupsState *st, PyObject *name)
{
    PyObject *registries = Py_NewRef(st->by_value_registries);
    int found = 0;
    for (Py_ssize_t i = 0; found == 0 && i < PyList_GET_SIZE(registries); i++) {
        PyObject *registry = Py_NewRef(PyList_GET_ITEM(registries, i));
        found = !PySet_CheckExact(registry) ? 1
                : PySet_GET_SIZE(registry) == 0 ? 0
                : PySet_Contains(registry, name);
        Py_DECREF(registry);
    }
    Py_DECREF(registries);
    return found;
}

/* Whether no registry names anything (each an empty exact set): then no
 * lookup is needed. Runs no Python code. */
static int
registries_empty(SpeedupsState *st)
{
    PyObject *registries = st->by_value_registries;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(registries); i++) {
        PyObject *registry = PyList_GET_ITEM(registries, i);
        if (!PySet_CheckExact(registry) || PySet_GET_SIZE(registry) != 0) {
            return 0;
        }
    }
    return 1;
}

/* Whether the module named `module_name` (an exact str, held by the caller) is
 * registered for pickling by value now, or is under a registered package, as
 * policy.is_registered (and cloudpickle) answer: the name itself or one of its
 * parents (the text before any '.': "a.b.c" is under "a.b" and "a", "ab" is
 * not under "a") is in a registry. Nothing about the registries is remembered:
 * registrations, unregistrations and a program editing a set directly change
 * them at any time, so they are read on every call, with the lookups the policy
 * makes (an item that is not a str may compare in Python, as it does there).
 * 1, 0, or -1 with an exception set. */
static int
registered_by_value(SpeedupsState *st, PyObject *module_name)
{
    if (registries_empty(st)) {
        return 0;
    }
    int found = in_a_registry(st, module_name);
    Py_ssize_t length = PyUnicode_GET_LENGTH(module_name);
    if (found != 0 || PyUnicode_FindChar(module_name, '.', 0, length, -1) == -1) {
        return found;
    }
    PyObject *parents;
    if (dict_get_ref(st->parent_names, module_name, &parents) == 0) {
        PyObject *list = PyList_New(0);
        for (Py_ssize_t end = length; list != NULL;) { /* (as rpartition('.') walks up) */
            Py_ssize_t dot = PyUnicode_FindChar(module_name, '.', 0, end, -1);
            PyObject *parent = dot < 0 ? NULL : PyUnicode_Substring(module_name, 0, dot);
            if (dot == -1) {
                break;
            }
            if (parent == NULL || PyList_Append(list, parent) < 0) {
                Py_CLEAR(list);
            }
            Py_XDECREF(parent);
            end = dot;
        }
        parents = list == NULL ? NULL : PyList_AsTuple(list);
        Py_XDECREF(list);
        if (parents != NULL && PyDict_GET_SIZE(st->parent_names) >= MAX_PARENT_NAMES) {
            PyDict_Clear(st->parent_names);
        }
        if (parents != NULL && PyDict_SetItem(st->parent_names, module_name, parents) < 0) {
            Py_CLEAR(parents);
        }
    }
    if (parents == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; found == 0 && i < PyTuple_GET_SIZE(parents); i++) {
        found = in_a_registry(st, PyTuple_GET_ITEM(parents, i));
    }
    Py_DECREF(parents);
    return found;
}

/* Whether sys.modules[module_name] is `module`, which holds obj as `qualname`,
 * and the module is not registered by value (the caller holds all four: a
 * lookup may run Python code, so the registry is read first). */
static int
found_as(SpeedupsState *st, PyObject *obj, PyObject *module, PyObject *module_name,
         PyObject *qualname)
{
    if (registered_by_value(st, module_name) != 0) {
        PyErr_Clear(); /* (an error: not found, and the policy decides) */
        return 0;
    }
    PyObject *modules = sys_modules(st);
    if (modules == NULL || PyDict_GetItemWithError(modules, module_name) != module) {
        return 0; /* (compared by identity only: the item may be gone) */
    }
    return PyDict_GetItemWithError(PyModule_GetDict(module), qualname) == obj;
}

/* Whether the policy sends a function or class by value for its names alone
 * (policy.reason_by_names, class_reason): the sender's main module, a lambda,
 * a <locals> name. 1, 0, or -1 with an exception set. */
static int
by_value_by_names(SpeedupsState *st, PyObject *obj, PyObject *module_name, PyObject *qualname)
{
    int found = PySequence_Contains(st->main_modules, module_name);
    if (found == 0) {
        found = PyUnicode_Find(qualname, st->str_locals, 0, PY_SSIZE_T_MAX, 1) != -1;
    }
    if (found == 0 && PyFunction_Check(obj)) {
        found = PyUnicode_Find(qualname, st->str_lambda, 0, PY_SSIZE_T_MAX, 1) != -1;
    }
    return PyErr_Occurred() ? -1 : found;
}

/* Whether two exact str are equal (most often the very same object). */
static int
same_text(PyObject *a, PyObject *b)
{
    return a == b || PyUnicode_Compare(a, b) == 0;
}

static PyObject *
remember_by_reference(PyObject *self_module, PyObject *obj)
{
    SpeedupsState *st = module_state(self_module);
    PyObject *module_name = NULL, *qualname = NULL, *names = NULL, *module = NULL;
    PyObject *entry = NULL;
    int failed = 0;
    if (is_plain_class(obj) && !(((PyTypeObject *)obj)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        /* A static type's names come from tp_name, as type.__module__ reads them. */
        module_name = PyObject_GetAttr(obj, st->str_module);
        qualname = module_name == NULL ? NULL : PyObject_GetAttr(obj, st->str_qualname);
        names = qualname == NULL ? NULL : PyTuple_Pack(3, Py_None, module_name, qualname);
        Py_XDECREF(module_name);
        Py_XDECREF(qualname);
        if (names == NULL) {
            return NULL;
        }
    }
    /* The names read here are checked again by the policy's own rules: they
     * may have changed since the policy read its own. */
    if (current_names(st, obj, names, &module_name, &qualname)
        && by_value_by_names(st, obj, module_name, qualname) == 0) {
        PyObject *modules = sys_modules(st);
        if (modules != NULL && dict_get_ref(modules, module_name, &module) > 0
            && PyModule_CheckExact(module)
            && found_as(st, obj, module, module_name, qualname)) { /* not: a dotted name, registered */
            entry = PyTuple_Pack(3, module, module_name, qualname);
            failed = entry == NULL;
        }
    }
    if (entry != NULL) {
        if (PyDict_GET_SIZE(st->by_reference) >= MAX_BY_REFERENCE) {
            PyDict_Clear(st->by_reference);
        }
        failed = PyDict_SetItem(st->by_reference, obj, entry) < 0;
    }
    failed = failed || PyErr_Occurred() != NULL;
    Py_XDECREF(entry);
    Py_XDECREF(module);
    Py_XDECREF(module_name);
    Py_XDECREF(qualname);
    Py_XDECREF(names);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Whether obj is a remembered function or class that is still importable. */
static int
known_by_reference(SpeedupsState *st, PyObject *obj)
{
    if (!Py_IS_TYPE(obj, &PyFunction_Type) && !is_plain_class(obj)) {
        return 0; /* a metaclass may hash and compare in Python */
    }
    PyObject *entry, *module_name, *qualname;
    int known = 0;
    if (dict_get_ref(st->by_reference, obj, &entry) > 0
        && current_names(st, obj, entry, &module_name, &qualname)) {
        /* The names the policy's rules passed (when remembered), and a module
         * whose class was not changed (a lazy module may answer getattr otherwise). */
        PyObject *module = PyTuple_GET_ITEM(entry, 0);
        known = same_text(module_name, PyTuple_GET_ITEM(entry, 1))
                && same_text(qualname, PyTuple_GET_ITEM(entry, 2)) && PyModule_CheckExact(module)
                && found_as(st, obj, module, module_name, qualname);
        Py_DECREF(module_name);
        Py_DECREF(qualname);
    }
    Py_XDECREF(entry);
    if (!known) {
        PyErr_Clear(); /* a miss, whatever the lookups raised: the Python policy decides */
    }
    return known;
}

static PyObject *function_snapshot(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
static int same_items(PyObject *a, PyObject *b);

/* The dict a by-value function's globals are rebuilt from: one per module and
 * payload (state.globals_ref, keyed by id of the module's globals), as
 * reducers._base_globals makes it. A new reference, or NULL with an error. */
static PyObject *
base_globals(SpeedupsState *st, PyObject *state, PyObject *module_globals)
{
    PyObject *names[4] = {st->str_package, st->str_name, st->str_path, st->str_file};
    PyObject *globals_ref = PyObject_GetAttr(state, st->str_globals_ref);
    PyObject *key = globals_ref == NULL ? NULL : PyLong_FromVoidPtr(module_globals);
    PyObject *base = NULL;
    if (key != NULL && dict_get_ref(globals_ref, key, &base) == 0) { /* this payload's first */
        base = PyDict_New();
        if (base != NULL && PyDict_SetItem(globals_ref, key, base) < 0) {
            Py_CLEAR(base);
        }
    }
    int fill = base != NULL && PyDict_Check(base) && PyDict_GET_SIZE(base) == 0;
    for (size_t i = 0; fill && base != NULL && i < 4; i++) {
        PyObject *value;
        if (dict_get_ref(module_globals, names[i], &value) < 0
            || (value != NULL && PyDict_SetItem(base, names[i], value) < 0)) {
            Py_CLEAR(base);
        }
        Py_XDECREF(value);
    }
    Py_XDECREF(key);
    Py_XDECREF(globals_ref);
    return base;
}

/* Whether the dump running is in default mode (state.deterministic is None):
 * 1, 0, or -1 with an exception set. */
static int
in_default_mode(DispatchObject *self)
{
    SpeedupsState *st = self->st;
    PyObject *mode = PyObject_GetAttr(self->state, st->str_deterministic);
    if (mode == NULL) {
        return -1;
    }
    Py_DECREF(mode); /* the state holds it */
    return mode == Py_None;
}

/* A remembered function's entry (reducers._functions: id -> entry) and the
 * parts of its reduction, by position: ENTRY_FIELDS and PARTS_FIELDS below. */
enum { ENTRY_REF, ENTRY_SNAPSHOT, ENTRY_NAMES, ENTRY_MODULES, ENTRY_GROWABLE, ENTRY_GENERATION,
       ENTRY_PARTS, ENTRY_BLOCK, ENTRY_RECHECK, ENTRY_SIZE };
enum { PARTS_MAKE, PARTS_CODE, PARTS_CLOSURE, PARTS_STATE, PARTS_SETSTATE, PARTS_SIZE };
#define SNAPSHOT_FIXED 9 /* code ... closure: see SNAPSHOT_FIELDS */

/* Whether `value`, a global or a cell's contents of a remembered function, is
 * now a module to cloudpickle's submodule search: isinstance(value,
 * ModuleType), which an object's __class__ may answer, and answer otherwise
 * later; the exact builtin types here cannot. 1, 0, or -1 with an exception. */
static int
is_module_now(PyObject *value)
{
    if (PyUnicode_CheckExact(value) || PyLong_CheckExact(value) || value == Py_None
        || PyBool_Check(value) || PyFloat_CheckExact(value) || PyTuple_CheckExact(value)
        || PyList_CheckExact(value) || PyDict_CheckExact(value) || PyBytes_CheckExact(value)
        || PyFunction_Check(value) || PyType_CheckExact(value) || PyCFunction_CheckExact(value)
        || PySet_CheckExact(value) || PyFrozenSet_CheckExact(value)) {
        return 0;
    }
    return PyObject_IsInstance(value, (PyObject *)&PyModule_Type);
}

/* Where the globals' values and the cells' contents end in `snapshot` (of a
 * function whose global names are `names`): they start at SNAPSHOT_FIXED. */
static Py_ssize_t
dependencies_end(PyObject *snapshot, PyObject *names)
{
    PyObject *closure = PyTuple_GET_ITEM(snapshot, SNAPSHOT_FIXED - 1);
    Py_ssize_t end = SNAPSHOT_FIXED + PyTuple_GET_SIZE(names)
                     + (PyTuple_Check(closure) ? PyTuple_GET_SIZE(closure) : 0);
    return end < PyTuple_GET_SIZE(snapshot) ? end : PyTuple_GET_SIZE(snapshot);
}

/* Whether any global or cell's contents in `snapshot` (of a function whose
 * global names are `names`) is now a module: 1, 0, or -1 with an exception. */
static int
any_module_now(SpeedupsState *st, PyObject *snapshot, PyObject *names)
{
    Py_ssize_t end = dependencies_end(snapshot, names);
    for (Py_ssize_t i = SNAPSHOT_FIXED; i < end; i++) {
        PyObject *value = PyTuple_GET_ITEM(snapshot, i);
        int module = value == st->missing_marker ? 0 : is_module_now(value);
        if (module != 0) {
            return module;
        }
    }
    return 0;
}

static int modules_unchanged(SpeedupsState *st, PyObject *modules);

/* getattr(obj, name) into *result: 1, or 0 on AttributeError (as getattr's
 * default catches it), or -1 with another exception set. */
static int
optional_attr(PyObject *obj, PyObject *name, PyObject **result)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, result);
#else
    *result = PyObject_GetAttr(obj, name);
    if (*result != NULL) {
        return 1;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
        return -1;
    }
    PyErr_Clear();
    return 0;
#endif
}

/* For an entry whose submodules depend on sys.modules (its `modules` field,
 * reducers._modules_entry: (sys.modules's items, the modules' names and
 * packages)): whether what reducers._same_submodules checks holds without a
 * walk of sys.modules: the modules among the globals and cells of `snapshot`
 * have the remembered names and packages (reducers._module_names, asked
 * again), and then the items are the current, unchanged sys.modules's
 * (modules_items). In that order, as the Python path and cloudpickle's search
 * read them: isinstance() and the names' reads may run Python code, which may
 * import a module, so sys.modules is checked after them. 1, 0, or -1 with an
 * exception set. */
static int
same_modules_now(SpeedupsState *st, PyObject *snapshot, PyObject *names, PyObject *modules_entry)
{
    if (!PyTuple_CheckExact(modules_entry) || PyTuple_GET_SIZE(modules_entry) != 2
        || PyTuple_GET_ITEM(modules_entry, 0) != st->modules_items) {
        return 0; /* (a cheap miss first: no name is read for an entry that cannot hold) */
    }
    PyObject *found = PyList_New(0);
    Py_ssize_t end = dependencies_end(snapshot, names);
    for (Py_ssize_t i = SNAPSHOT_FIXED; found != NULL && i < end; i++) {
        PyObject *value = PyTuple_GET_ITEM(snapshot, i);
        int module = value == st->missing_marker ? 0 : is_module_now(value);
        PyObject *name = NULL, *package = NULL, *pair = NULL;
        if (module != 0 && (module < 0 || optional_attr(value, st->str_name, &name) < 0
                            || optional_attr(value, st->str_package, &package) < 0
                            || (pair = PyTuple_Pack(2, name ? name : Py_None,
                                                    package ? package : Py_None)) == NULL
                            || PyList_Append(found, pair) < 0)) {
            Py_CLEAR(found);
        }
        Py_XDECREF(name);
        Py_XDECREF(package);
        Py_XDECREF(pair);
    }
    PyObject *now = found == NULL ? NULL : PyList_AsTuple(found);
    Py_XDECREF(found);
    int same = now == NULL ? -1 : PyObject_RichCompareBool(now, PyTuple_GET_ITEM(modules_entry, 1), Py_EQ);
    Py_XDECREF(now);
    if (same != 1) {
        return same;
    }
    /* Validated last: nothing below runs Python code. */
    PyObject *modules = sys_modules(st);
    return modules != NULL && PyTuple_GET_ITEM(modules_entry, 0) == st->modules_items
           && modules_unchanged(st, modules);
}

/* Whether `value` is of a type whose size cannot change in place
 * (captures._FIXED_SIZE), or a builtin function of a module
 * (captures._module_builtin). */
static int
fixed_size(PyObject *value)
{
    PyTypeObject *type = Py_TYPE(value);
    if (PyCFunction_CheckExact(value)) {
        PyObject *owner = PyCFunction_GET_SELF(value);
        return owner == NULL || owner == Py_None || PyModule_CheckExact(owner);
    }
    return type == &PyLong_Type || type == &PyFloat_Type || type == &PyBool_Type
           || type == &PyComplex_Type || value == Py_None || type == &PyFunction_Type
           || type == &PyModule_Type || type == &PyType_Type || type == &PyUnicode_Type
           || type == &PyBytes_Type;
}

/* Whether the captures of a remembered function that could grow in place
 * have the sizes its entry remembered (`growable`: captures.growable_sizes,
 * from the globals of its reduction's state and the contents of its cells),
 * every one with a length: then the Python path would neither warn nor
 * change the entry. 1, 0, or -1 with an exception set (which a len() raised:
 * the Python path raises it again). */
static int
same_growable_sizes(PyObject *func, PyObject *parts, PyObject *growable)
{
    PyObject *state = PyTuple_GET_ITEM(parts, PARTS_STATE), *slots, *globals, *closure;
    if (!PyTuple_CheckExact(growable) || !PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != 2
        || !PyDict_CheckExact(slots = PyTuple_GET_ITEM(state, 1))
        || (globals = PyDict_GetItemString(slots, "__globals__")) == NULL || !PyDict_CheckExact(globals)
        || (closure = PyDict_GetItemString(slots, "__closure__")) == NULL
        || (closure != Py_None && !PyTuple_CheckExact(closure))) {
        return 0;
    }
    /* What captures.captured_values lists: the globals' values, then the cells'
     * contents (zip with co_freevars), copied first (a len() may run code). */
    PyObject *freevars = PyCode_GetFreevars((PyCodeObject *)PyFunction_GET_CODE(func));
    PyObject *values = freevars == NULL ? NULL : PyDict_Values(globals);
    Py_ssize_t cells = closure == Py_None ? 0 : PyTuple_GET_SIZE(closure);
    if (freevars != NULL && PyTuple_GET_SIZE(freevars) < cells) {
        cells = PyTuple_GET_SIZE(freevars);
    }
    Py_XDECREF(freevars);
    for (Py_ssize_t i = 0; values != NULL && i < cells; i++) {
        PyObject *cell = PyTuple_GET_ITEM(closure, i);
        PyObject *contents = PyCell_Check(cell) ? PyCell_GET(cell) : NULL;
        if (!PyCell_Check(cell) || (contents != NULL && PyList_Append(values, contents) < 0)) {
            Py_CLEAR(values);
        }
    }
    if (values == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    int same = 1;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; same == 1 && i < PyList_GET_SIZE(values); i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        if (fixed_size(value)) {
            continue;
        }
        Py_ssize_t size = PyObject_Size(value);
        if (size < 0) { /* (no length: -1, which the Python path checks every time) */
            same = PyErr_ExceptionMatches(PyExc_TypeError) ? (PyErr_Clear(), 0) : -1;
        }
        else if (at >= PyTuple_GET_SIZE(growable)
                 || PyLong_AsSsize_t(PyTuple_GET_ITEM(growable, at++)) != size) {
            same = PyErr_Occurred() ? -1 : 0;
        }
    }
    Py_DECREF(values);
    return same == 1 && at == PyTuple_GET_SIZE(growable) ? 1 : same;
}

/* The value of the state's `blocks` context variable (a new reference: False
 * where the state has none, or it is not set), or NULL with an exception set. */
static PyObject *
blocks_value(DispatchObject *self)
{
    PyObject *var = PyObject_GetAttr(self->state, self->st->str_blocks), *value = NULL;
    if (var == Py_None) {
        value = Py_NewRef(Py_False);
    }
    else if (var != NULL && PyContextVar_CheckExact(var)) {
        PyContextVar_Get(var, Py_False, &value);
    }
    else if (var != NULL) {
        PyErr_SetString(PyExc_TypeError, "graphpickle: a pickler's `blocks` is not a ContextVar");
    }
    Py_XDECREF(var);
    return value;
}

/* What a `blocks` value asks of this dump (reducers._blocks_wanted): true, a
 * block in every payload (1); a connection's session, blocks once per
 * connection (2: core/connection.py); or none (0). */
static int
wanted_of(PyObject *value)
{
    return value == Py_True ? 1 : value != Py_False && value != Py_None ? 2 : 0;
}

/* wanted_of the state's `blocks` value; -1 with an exception set. */
static int
blocks_wanted(DispatchObject *self)
{
    PyObject *value = blocks_value(self);
    int wanted = value == NULL ? -1 : wanted_of(value);
    Py_XDECREF(value);
    return wanted;
}

/* reducers._function_blocks's entries: (flat, code, items, block, sent, values,
 * digest). */
enum { MADE_FLAT, MADE_CODE, MADE_ITEMS, MADE_BLOCK, MADE_SENT, MADE_VALUES, MADE_DIGEST, MADE_SIZE };

/* Whether `name` is a key of `owner.<attribute>`, a dict: 1, 0, or -1 with an
 * exception set (or 0 for anything but a dict: the Python function decides). */
static int
held_in(PyObject *owner, PyObject *attribute, PyObject *name)
{
    PyObject *table = PyObject_GetAttr(owner, attribute);
    int found = table == NULL ? -1 : PyDict_CheckExact(table) ? PyDict_Contains(table, name) : 0;
    Py_XDECREF(table);
    return found;
}

/* Whether `base`, the payload's base globals of a module that an earlier
 * function of it made, is what _held_reduction would keep for a later one: a
 * HeldGlobals whose sent_as the first block set, holding the very items of
 * this function's block, in order (its `made[2] != items`), each key an exact
 * str and each value an exact str or None, as held_items keeps (a HeldGlobals
 * left empty is filled later from the module's globals as they are then: its
 * values may be anything). Comparing exact strs runs no code, so the dict
 * cannot change under PyDict_Next. 1, 0 (the Python function decides), or -1
 * with an exception set. */
static int
later_base_agrees(SpeedupsState *st, PyObject *base, PyObject *items)
{
    if (!Py_IS_TYPE(base, (PyTypeObject *)st->held_globals_type) || !PyTuple_CheckExact(items)
        || PyDict_GET_SIZE(base) != PyTuple_GET_SIZE(items)) {
        return 0;
    }
    PyObject *sent_as = PyObject_GetAttr(base, st->str_sent_as);
    if (sent_as == NULL) {
        return -1;
    }
    int set = sent_as != Py_None;
    Py_DECREF(sent_as);
    if (!set) {
        return 0;
    }
    Py_ssize_t pos = 0, i = 0, n = PyTuple_GET_SIZE(items);
    PyObject *key, *value;
    while (PyDict_Next(base, &pos, &key, &value)) {
        PyObject *pair = i < n ? PyTuple_GET_ITEM(items, i++) : NULL;
        if (pair == NULL || !PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            return 0;
        }
        PyObject *held_key = PyTuple_GET_ITEM(pair, 0), *held_value = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(held_key)
            || (value != Py_None && !PyUnicode_CheckExact(value))
            || (held_value != Py_None && !PyUnicode_CheckExact(held_value))) {
            return 0;
        }
        int same = PyUnicode_Compare(key, held_key) == 0
                   && (value == Py_None || held_value == Py_None ? value == held_value
                                                                 : PyUnicode_Compare(value, held_value) == 0);
        if (!same) {
            return 0;
        }
    }
    return i == n;
}

/* reducers._held_reduction's answer where it is the same every time: the
 * function's block made already (_function_blocks, for this very flat state
 * and code), the receiver holding it or this write carrying it already (no
 * bookkeeping to do), and either this payload's first function of its module,
 * whose base values are the very ones the block's items were read from, or a
 * later one whose block holds the items of the base the first one made
 * (later_base_agrees). That is (function_ref, (digest, base, closure, *sent)),
 * `base` for the first a new HeldGlobals of the block's items in this
 * payload's globals_ref, named by that same call.
 * NULL without an exception for anything else: the Python function answers. */
static PyObject *
held_function_reduction(DispatchObject *self, PyObject *func, PyObject *entry, PyObject *session)
{
    SpeedupsState *st = self->st;
    PyObject *block = PyTuple_GET_ITEM(entry, ENTRY_BLOCK);
    PyObject *parts = PyTuple_GET_ITEM(entry, ENTRY_PARTS);
    PyObject *module_globals = ((PyFunctionObject *)func)->func_globals;
    if (st->function_blocks == NULL || !Py_IS_TYPE(session, (PyTypeObject *)st->session_type)
        || !PyTuple_CheckExact(block) || PyTuple_GET_SIZE(block) != 2 || !PyDict_CheckExact(module_globals)) {
        return NULL;
    }
    PyObject *flat = PyTuple_GET_ITEM(block, 1);
    PyObject *result = NULL, *made = NULL, *globals_ref = NULL, *base = NULL, *sender = NULL;
    PyObject *key = PyLong_FromVoidPtr(flat), *module_key = PyLong_FromVoidPtr(module_globals);
    if (key == NULL || module_key == NULL || dict_get_ref(st->function_blocks, key, &made) <= 0
        || !PyTuple_CheckExact(made) || PyTuple_GET_SIZE(made) != MADE_SIZE
        || PyTuple_GET_ITEM(made, MADE_FLAT) != flat
        || PyTuple_GET_ITEM(made, MADE_CODE) != PyTuple_GET_ITEM(parts, PARTS_CODE)
        || !PyTuple_CheckExact(PyTuple_GET_ITEM(made, MADE_SENT))
        || !PyBytes_CheckExact(PyTuple_GET_ITEM(made, MADE_DIGEST))) {
        goto done;
    }
    globals_ref = PyObject_GetAttr(self->state, st->str_globals_ref);
    if (globals_ref == NULL || !PyDict_CheckExact(globals_ref)) {
        goto done;
    }
    if (dict_get_ref(globals_ref, module_key, &base) < 0) {
        goto done;
    }
    PyObject *values = PyTuple_GET_ITEM(made, MADE_VALUES); /* (None: made for a later one) */
    if (base != NULL) { /* a later function of the module: the payload's base is made */
        if (later_base_agrees(st, base, PyTuple_GET_ITEM(made, MADE_ITEMS)) != 1) {
            goto done;
        }
    }
    else if (!PyTuple_CheckExact(values) || PyTuple_GET_SIZE(values) != 4) {
        goto done;
    }
    /* The base values, as _held_reduction reads them (the very same objects). */
    PyObject *names[4] = {st->str_package, st->str_name, st->str_path, st->str_file};
    for (int i = 0; base == NULL && i < 4; i++) {
        PyObject *value;
        if (dict_get_ref(module_globals, names[i], &value) < 0) {
            goto done;
        }
        int same = (value == NULL ? st->missing_marker : value) == PyTuple_GET_ITEM(values, i);
        Py_XDECREF(value);
        if (!same) {
            goto done;
        }
    }
    PyObject *digest = PyTuple_GET_ITEM(made, MADE_DIGEST);
    sender = PyObject_GetAttr(session, st->str_sender);
    int held = sender == NULL ? -1 : held_in(sender, st->str_held, digest);
    if (held == 0) {
        held = held_in(session, st->str_carried, digest);
    }
    if (held != 1) {
        goto done; /* (not held: Session.carries keeps the books) */
    }
    if (base == NULL) {
        base = PyObject_CallOneArg(st->held_globals_type, PyTuple_GET_ITEM(made, MADE_ITEMS));
        PyObject *named = base == NULL ? NULL : PyTuple_Pack(1, digest);
        PyObject *sent_as = named == NULL ? NULL : PyTuple_Pack(2, st->function_ref_object, named);
        Py_XDECREF(named);
        int failed = sent_as == NULL || PyObject_SetAttr(base, st->str_sent_as, sent_as) < 0
                     || PyDict_SetItem(globals_ref, module_key, base) < 0;
        Py_XDECREF(sent_as);
        if (failed) {
            goto done;
        }
    }
    /* (function_ref, (digest, base, closure, *sent)) */
    PyObject *sent = PyTuple_GET_ITEM(made, MADE_SENT);
    Py_ssize_t n = PyTuple_GET_SIZE(sent);
    PyObject *args = PyTuple_New(3 + n);
    if (args == NULL) {
        goto done;
    }
    PyTuple_SET_ITEM(args, 0, Py_NewRef(digest));
    PyTuple_SET_ITEM(args, 1, Py_NewRef(base));
    PyTuple_SET_ITEM(args, 2, Py_NewRef(PyTuple_GET_ITEM(parts, PARTS_CLOSURE)));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(args, 3 + i, Py_NewRef(PyTuple_GET_ITEM(sent, i)));
    }
    result = PyTuple_Pack(2, st->function_ref_object, args);
    Py_DECREF(args);
done:
    Py_XDECREF(key);
    Py_XDECREF(module_key);
    Py_XDECREF(made);
    Py_XDECREF(globals_ref);
    Py_XDECREF(base);
    Py_XDECREF(sender);
    return result;
}

/* What the function handler (reducers._reduce_function) answers for a function
 * it remembered, when a new snapshot holds the very same objects; NULL (no
 * exception set) to ask it: in deterministic mode, for an entry whose
 * submodules or growable captures must be checked too (the Python path does),
 * or on any error. */
static PyObject *
remembered_function(DispatchObject *self, PyObject *func)
{
    SpeedupsState *st = self->st;
    if (st->functions == NULL || !PyFunction_Check(func) || PyDict_GET_SIZE(st->functions) == 0) {
        return NULL;
    }
    PyObject *result = NULL, *obj = NULL, *snapshot = NULL, *entry = NULL, *generation = NULL;
    PyObject *blocks = NULL;
    PyObject *key = PyLong_FromVoidPtr(func);
    if (key == NULL || dict_get_ref(st->functions, key, &entry) <= 0 || !PyTuple_CheckExact(entry)
        || PyTuple_GET_SIZE(entry) != ENTRY_SIZE || PyTuple_GET_ITEM(entry, ENTRY_RECHECK) != Py_False) {
        goto done;
    }
    PyObject *parts = PyTuple_GET_ITEM(entry, ENTRY_PARTS);
    if (dict_get_ref(st->captures_globals, st->str_generation, &generation) <= 0
        || !PyTuple_CheckExact(parts) || PyTuple_GET_SIZE(parts) != PARTS_SIZE
        || PyObject_RichCompareBool(generation, PyTuple_GET_ITEM(entry, ENTRY_GENERATION), Py_EQ) != 1) {
        goto done;
    }
    obj = in_default_mode(self) == 1 ? PyObject_CallNoArgs(PyTuple_GET_ITEM(entry, ENTRY_REF)) : NULL;
    if (obj != func) {
        goto done;
    }
    PyObject *names = PyTuple_GET_ITEM(entry, ENTRY_NAMES);
    PyObject *snapshot_args[3] = {func, names, st->missing_marker};
    /* (globals of another mapping type are never remembered: reducers.py) */
    snapshot = PyDict_CheckExact(((PyFunctionObject *)func)->func_globals)
                   ? function_snapshot(NULL, snapshot_args, 3)
                   : NULL;
    PyObject *modules_entry = PyTuple_GET_ITEM(entry, ENTRY_MODULES);
    if (snapshot == NULL || !same_items(snapshot, PyTuple_GET_ITEM(entry, ENTRY_SNAPSHOT))
        || (modules_entry == Py_None ? any_module_now(st, snapshot, names) != 0
                                     : same_modules_now(st, snapshot, names, modules_entry) != 1)
        || (PyTuple_GET_ITEM(entry, ENTRY_GROWABLE) != Py_None
            && same_growable_sizes(func, parts, PyTuple_GET_ITEM(entry, ENTRY_GROWABLE)) != 1)
        || PyObject_SetAttr(self->state, st->str_by_value, Py_True) < 0) {
        goto done;
    }
    self->touched = 1;
    PyObject *block = PyTuple_GET_ITEM(entry, ENTRY_BLOCK); /* None, or (make_function, flat) */
    blocks = block == Py_None ? Py_NewRef(Py_False) : blocks_value(self);
    int wanted = blocks == NULL ? -1 : wanted_of(blocks);
    if (wanted == 2 && st->session_reduction != NULL) {
        /* A connection's session: reducers._block_reduction writes the
         * function block, or its digest (here where it is the same as before). */
        result = held_function_reduction(self, func, entry, blocks);
        if (result == NULL && !PyErr_Occurred()) {
            PyObject *call_args[3] = {self->state, func, entry};
            result = PyObject_Vectorcall(st->session_reduction, call_args, 3, NULL);
        }
        goto done;
    }
    if (wanted != 0 && wanted != 1) {
        goto done; /* (an error: the handler runs) */
    }
    PyObject *base = base_globals(self->st, self->state, ((PyFunctionObject *)func)->func_globals);
    if (wanted == 1 && base != NULL && PyTuple_CheckExact(block) && PyTuple_GET_SIZE(block) == 2
        && PyTuple_CheckExact(PyTuple_GET_ITEM(block, 1))) {
        /* (make_function, (code, base_globals, closure, *flat)), as reducers._block_reduction */
        PyObject *head = PyTuple_Pack(3, PyTuple_GET_ITEM(parts, PARTS_CODE), base,
                                      PyTuple_GET_ITEM(parts, PARTS_CLOSURE));
        PyObject *args = head == NULL ? NULL : PySequence_Concat(head, PyTuple_GET_ITEM(block, 1));
        result = args == NULL ? NULL : PyTuple_Pack(2, PyTuple_GET_ITEM(block, 0), args);
        Py_XDECREF(head);
        Py_XDECREF(args);
        Py_DECREF(base);
    }
    else if (base != NULL && wanted == 0) {
        /* (code, base_globals, None, None, closure), as _function_getnewargs */
        PyObject *args = PyTuple_Pack(5, PyTuple_GET_ITEM(parts, PARTS_CODE), base, Py_None,
                                      Py_None, PyTuple_GET_ITEM(parts, PARTS_CLOSURE));
        result = args == NULL ? NULL
                              : PyTuple_Pack(6, PyTuple_GET_ITEM(parts, PARTS_MAKE), args,
                                             PyTuple_GET_ITEM(parts, PARTS_STATE), Py_None, Py_None,
                                             PyTuple_GET_ITEM(parts, PARTS_SETSTATE));
        Py_XDECREF(args);
        Py_DECREF(base);
    }
    else {
        Py_XDECREF(base);
    }
done:
    Py_XDECREF(key);
    Py_XDECREF(entry);
    Py_XDECREF(generation);
    Py_XDECREF(obj);
    Py_XDECREF(snapshot);
    Py_XDECREF(blocks);
    if (result == NULL) {
        PyErr_Clear(); /* the handler runs, and answers (or raises) itself */
    }
    return result;
}

/* reducers._reduce_module's answer for a module it writes by reference (its
 * name is not registered by value, nor under a registered package, and is that
 * of the module sys.modules holds under it: policy.module_reason, in that
 * order), or NULL (no exception set) to ask it. `subimport` names it:
 * cloudpickle's, or blocks.subimport on a connection. */
static PyObject *
module_by_reference(SpeedupsState *st, PyObject *module, PyObject *subimport)
{
    if (st->subimport == NULL || !PyModule_CheckExact(module)) {
        return NULL;
    }
    /* (an exact module's __name__ is its dict's; an exact str hashes without code;
     * held: the registry's lookups may run code) */
    PyObject *name;
    PyObject *result = NULL;
    if (dict_get_ref(PyModule_GetDict(module), st->str_name, &name) > 0 && PyUnicode_CheckExact(name)
        && registered_by_value(st, name) == 0) {
        PyObject *modules = sys_modules(st);
        if (modules != NULL && PyDict_GetItemWithError(modules, name) == module) {
            result = Py_BuildValue("(O(O))", subimport, name);
        }
    }
    Py_XDECREF(name);
    if (result == NULL) {
        PyErr_Clear(); /* the handler runs, and answers */
    }
    return result;
}

static PyObject *
remembered_reduction(DispatchObject *self, PyObject *handler, PyObject *obj)
{
    SpeedupsState *st = self->st;
    if (handler == st->function_handler) {
        return remembered_function(self, obj);
    }
    if (st->held_globals_type != NULL && Py_IS_TYPE(obj, (PyTypeObject *)st->held_globals_type)) {
        /* reducers._reduce_held_globals where the base was made from a block:
         * that block's call (sent_as); a plain dict otherwise, in Python. */
        PyObject *sent_as = PyObject_GetAttr(obj, st->str_sent_as);
        if (sent_as == NULL || sent_as == Py_None) {
            Py_XDECREF(sent_as);
            PyErr_Clear(); /* the handler runs, and answers */
            return NULL;
        }
        return sent_as;
    }
    if (handler == st->module_handler) {
        int wanted = blocks_wanted(self);
        if (wanted < 0 || (wanted == 2 && st->session_subimport == NULL)) {
            PyErr_Clear(); /* the handler runs, and answers */
            return NULL;
        }
        return module_by_reference(st, obj, wanted == 2 ? st->session_subimport : st->subimport);
    }
    if (handler == st->class_handler) {
        if (st->builtin_types == NULL || !is_plain_class(obj)) { /* a metaclass may hash in Python */
            return NULL;
        }
        PyObject *reduction;
        dict_get_ref(st->builtin_types, obj, &reduction); /* by identity */
        return reduction;
    }
    if (handler != st->code_handler || st->codes == NULL || PyDict_GET_SIZE(st->codes) == 0) {
        return NULL;
    }
    PyObject *key = PyLong_FromVoidPtr(obj); /* id(obj) */
    if (key == NULL) {
        PyErr_Clear(); /* the handler runs, and answers */
        return NULL;
    }
    PyObject *entry;
    int found = dict_get_ref(st->codes, key, &entry);
    Py_DECREF(key);
    /* (code, reduction, reduction when blocks are wanted or None until made) */
    if (found <= 0 || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3
        || PyTuple_GET_ITEM(entry, 0) != obj) {
        Py_XDECREF(entry);
        return NULL;
    }
    int default_mode = in_default_mode(self);
    int blocks = default_mode == 1 ? blocks_wanted(self) : 0;
    if (default_mode < 0 || blocks < 0) {
        PyErr_Clear(); /* the handler runs, and answers */
    }
    PyObject *answer = PyTuple_GET_ITEM(entry, blocks == 1 ? 2 : 1);
    /* (a session: the handler writes the block, or a reference to it) */
    PyObject *result = default_mode == 1 && blocks >= 0 && blocks != 2 && answer != Py_None
                           ? Py_NewRef(answer) : NULL;
    Py_DECREF(entry);
    return result;
}

/* reducers._same_name: the very object, or an equal exact str (comparing
 * them runs no code). */
static int
same_name(PyObject *now, PyObject *read)
{
    return now == read
           || (now != NULL && PyUnicode_CheckExact(now) && PyUnicode_CheckExact(read)
               && PyUnicode_Compare(now, read) == 0);
}

/* Whether each class in `read` (reducers.names_read: (class, module,
 * qualname, ...), the classes whose names can change) still has those
 * names (reducers.same_names): 1, or 0 (a read that raised is a miss,
 * cleared: resolving again raises it). A heap type of metaclass `type` is read
 * in place (its __module__ is its dict's, its __qualname__ ht_qualname, as
 * type's getters read them), any other through getattr, which may run Python
 * code. */
static int
same_names_now(SpeedupsState *st, PyObject *read)
{
    if (!PyTuple_CheckExact(read) || PyTuple_GET_SIZE(read) % 3 != 0) {
        return 0;
    }
    int same = 1;
    for (Py_ssize_t i = 0; same && i < PyTuple_GET_SIZE(read); i += 3) {
        PyObject *cls = PyTuple_GET_ITEM(read, i), *module = PyTuple_GET_ITEM(read, i + 1);
        PyObject *qualname = PyTuple_GET_ITEM(read, i + 2);
        if (Py_IS_TYPE(cls, &PyType_Type) && (((PyTypeObject *)cls)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            PyObject *type_dict = ((PyTypeObject *)cls)->tp_dict;
            same = type_dict != NULL && same_name(PyDict_GetItemWithError(type_dict, st->str_module), module)
                   && same_name(((PyHeapTypeObject *)cls)->ht_qualname, qualname);
        }
        else {
            PyObject *now_module = PyObject_GetAttr(cls, st->str_module);
            PyObject *now_qualname = now_module == NULL ? NULL : PyObject_GetAttr(cls, st->str_qualname);
            same = same_name(now_module, module) && same_name(now_qualname, qualname);
            Py_XDECREF(now_module);
            Py_XDECREF(now_qualname);
        }
    }
    PyErr_Clear();
    return same;
}

static PyObject *
dispatch_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    DispatchObject *self = (DispatchObject *)op;
    SpeedupsState *st = self->st;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "reducer_override() takes exactly one argument");
        return NULL;
    }
    PyObject *obj = args[0];
    PyObject *type = (PyObject *)Py_TYPE(obj);
    PyObject *handler; /* held: a handler may change the dict while it runs */
    int found = dict_get_ref(self->handlers, type, &handler);
    if (found > 0 && PyTuple_CheckExact(handler)) {
        /* (handler, mro) or (handler, mro, names), resolved with what it read
         * (TypeDispatch.resolve and .still): used while type(obj).__mro__ is
         * that very tuple (resolved again after __bases__ was assigned) and its
         * classes have the very names a reducer lookup read. The names are read
         * first: a read may run code, which may assign __bases__. */
        PyObject *resolved = NULL;
        Py_ssize_t size = PyTuple_GET_SIZE(handler);
        if ((size == 2 || (size == 3 && same_names_now(st, PyTuple_GET_ITEM(handler, 2))))
            && PyTuple_GET_ITEM(handler, 1) == Py_TYPE(obj)->tp_mro) {
            resolved = Py_NewRef(PyTuple_GET_ITEM(handler, 0));
        }
        Py_SETREF(handler, resolved);
        found = resolved != NULL;
    }
    if (found == 0) {
        handler = PyObject_CallOneArg(self->resolve, type);
    }
    if (handler == NULL) {
        return NULL;
    }
    PyObject *result;
    if (handler == Py_None) {
        result = Py_NewRef(Py_NotImplemented);
    }
    else if ((handler == st->function_handler || handler == st->class_handler)
             && known_by_reference(st, obj)) {
        result = Py_NewRef(Py_NotImplemented); /* what the policy answered for it */
    }
    else if ((result = remembered_reduction(self, handler, obj)) != NULL) {
        /* the handler's answer, remembered (a new reference) */
    }
    else if (PyErr_Occurred()) {
        result = NULL;
    }
    else {
        self->touched = 1;
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
    self->st = PyType_GetModuleState(type);
    self->vectorcall = dispatch_vectorcall;
    return (PyObject *)self;
}

static int
dispatch_traverse(DispatchObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
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
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    dispatch_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type); /* each object of a heap type holds it */
}

static PyMemberDef dispatch_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(DispatchObject, vectorcall), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot dispatch_slots[] = {
    {Py_tp_doc, (void *)PyDoc_STR("Dispatch(handlers, resolve, state): a reducer_override in C.")},
    {Py_tp_new, dispatch_new},
    {Py_tp_dealloc, dispatch_dealloc},
    {Py_tp_traverse, dispatch_traverse},
    {Py_tp_clear, dispatch_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, dispatch_members},
    {0, NULL},
};

static PyType_Spec dispatch_spec = {
    .name = "graphpickle.core._speedups.Dispatch",
    .basicsize = sizeof(DispatchObject),
    .flags = TYPE_FLAGS | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = dispatch_slots,
};

/* ---- dumps and loads without a Python call or a new pickler per message ----
 *
 * A dask scheduler pickles every task on its own: for a message of a few
 * hundred bytes, building a graphpickle Pickler (a Python __init__, a type
 * table, a BytesIO) cost ten times the pickling. `Dumper` keeps a few
 * ready picklers per protocol and runs the C pickler's own dump() on one; the
 * Python `dumps` it stands for (`slow`) still handles every call it does not
 * recognise (deterministic payloads, odd arguments, a raised recursion limit on
 * 3.11), so both behave alike. `Loader` does the same for loads(). */


/* Whether the keyword `name` is `wanted` (interned names compare by pointer). */
static int
is_name(PyObject *name, PyObject *wanted)
{
    return name == wanted || PyUnicode_Compare(name, wanted) == 0;
}

/* Sink: the file of a pooled pickler. The C pickler hands write() its whole
 * output buffer at the end of a dump (and, for big payloads, each 64 KiB frame
 * and each large bytes object on the way): the first chunk is kept as it is,
 * so a small payload is returned without a copy. buffer() is the pickler's
 * buffer_callback: it forwards to the current dump's callback or, when there
 * is none, returns True (in band), which writes what no callback writes. */
typedef struct {
    PyObject_HEAD
    PyObject *first;    /* the first chunk, or NULL */
    PyObject *rest;     /* a list of the later chunks, or NULL */
    PyObject *callback; /* the current dump's buffer_callback, or NULL */
    Py_ssize_t handed;  /* buffers given to a callback since the last take */
    Py_ssize_t written; /* bytes written since the last take */
    Py_ssize_t peak;    /* the most bytes one take of the current dump gave */
    PyObject *mark;     /* where the dump's blocks start in its write's session, or NULL */
} SinkObject;

static PyObject *
sink_write(SinkObject *self, PyObject *data)
{
    PyObject *chunk;
    if (PyBytes_CheckExact(data)) {
        chunk = Py_NewRef(data);
    }
    else { /* the bytes of a bytearray or PickleBuffer being pickled: copied now, as BytesIO does */
        chunk = PyBytes_FromObject(data);
        if (chunk == NULL) {
            return NULL;
        }
    }
    /* (counted if it is kept or not: a write that fails fails the dump) */
    self->written += PyBytes_GET_SIZE(chunk);
    if (self->first == NULL) {
        self->first = chunk;
        Py_RETURN_NONE;
    }
    if (self->rest == NULL && (self->rest = PyList_New(0)) == NULL) {
        Py_DECREF(chunk);
        return NULL;
    }
    int failed = PyList_Append(self->rest, chunk);
    Py_DECREF(chunk);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
sink_buffer(SinkObject *self, PyObject *buffer)
{
    if (self->callback == NULL) {
        Py_RETURN_TRUE;
    }
    self->handed++;
    return PyObject_CallOneArg(self->callback, buffer);
}

/* take(): what was written since the last take, and an empty sink (its bytes
 * are the dump's payload, or a part that a restart throws away). */
static PyObject *sink_take(SpeedupsState *st, SinkObject *self);

static PyObject *
sink_take_method(SinkObject *self, PyObject *unused)
{
    return sink_take(PyType_GetModuleState(Py_TYPE(self)), self);
}

/* lend(callback): the buffer_callback of the dump that follows (None: every
 * buffer in band). */
static PyObject *
sink_lend(SinkObject *self, PyObject *callback)
{
    Py_XSETREF(self->callback, callback == Py_None ? NULL : Py_NewRef(callback));
    Py_RETURN_NONE;
}

/* The payload written since the last take (a new reference), and an empty sink. */
static PyObject *
sink_take(SpeedupsState *st, SinkObject *self)
{
    PyObject *first = self->first, *rest = self->rest;
    self->first = self->rest = NULL;
    self->handed = 0;
    if (self->written > self->peak) {
        self->peak = self->written;
    }
    self->written = 0;
    if (first == NULL) {
        Py_XDECREF(rest);
        return Py_NewRef(st->empty_bytes);
    }
    if (rest == NULL) {
        return first;
    }
    PyObject *joined = NULL;
    if (PyList_Insert(rest, 0, first) == 0) {
        joined = PyObject_CallMethodOneArg(st->empty_bytes, st->str_join, rest);
    }
    Py_DECREF(first);
    Py_DECREF(rest);
    return joined;
}

static int
sink_traverse(SinkObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->first);
    Py_VISIT(self->rest);
    Py_VISIT(self->callback);
    Py_VISIT(self->mark);
    return 0;
}

static int
sink_clear(SinkObject *self)
{
    Py_CLEAR(self->first);
    Py_CLEAR(self->rest);
    Py_CLEAR(self->callback);
    Py_CLEAR(self->mark);
    return 0;
}

static void
sink_dealloc(SinkObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    sink_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef sink_methods[] = {
    {"write", (PyCFunction)sink_write, METH_O, PyDoc_STR("write(data): keep a chunk.")},
    {"buffer", (PyCFunction)sink_buffer, METH_O,
     PyDoc_STR("buffer(pickle_buffer): the current buffer_callback's answer (True: in band).")},
    {"take", (PyCFunction)sink_take_method, METH_NOARGS,
     PyDoc_STR("take(): the bytes written since the last take.")},
    {"lend", (PyCFunction)sink_lend, METH_O,
     PyDoc_STR("lend(callback): the buffer_callback of the next dump (None: in band).")},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef sink_members[] = {
    {"handed", Py_T_PYSSIZET, offsetof(SinkObject, handed), Py_READONLY,
     PyDoc_STR("How many buffers went to a callback since the last take.")},
    {"written", Py_T_PYSSIZET, offsetof(SinkObject, written), Py_READONLY,
     PyDoc_STR("How many bytes were written since the last take.")},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *
sink_get_mark(SinkObject *self, void *unused)
{
    return Py_NewRef(self->mark == NULL ? Py_None : self->mark);
}

static int
sink_set_mark(SinkObject *self, PyObject *mark, void *unused)
{
    Py_XSETREF(self->mark, mark == NULL || mark == Py_None ? NULL : Py_NewRef(mark));
    return 0;
}

static PyGetSetDef sink_getset[] = {
    {"mark", (getter)sink_get_mark, (setter)sink_set_mark,
     PyDoc_STR("Where the current dump's blocks start in its write's session (None: none yet)."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot sink_slots[] = {
    {Py_tp_doc, (void *)PyDoc_STR("Sink(): the output file and buffer_callback of a pooled pickler.")},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, sink_dealloc},
    {Py_tp_traverse, sink_traverse},
    {Py_tp_clear, sink_clear},
    {Py_tp_methods, sink_methods},
    {Py_tp_members, sink_members},
    {Py_tp_getset, sink_getset},
    {0, NULL},
};

static PyType_Spec sink_spec = {
    .name = "graphpickle.core._speedups.Sink",
    .basicsize = sizeof(SinkObject),
    .flags = TYPE_FLAGS,
    .slots = sink_slots,
};

enum { SIGNATURE_GRAPHPICKLE = 0, SIGNATURE_DISTRIBUTED = 1 };
#define N_PROTOCOLS 6      /* 0 to pickle.HIGHEST_PROTOCOL (5) */
#define POOL_SIZE 4        /* ready picklers per protocol: threads, and dumps inside a reduction */
#define SMALL_PAYLOAD 256  /* after a bigger payload the memo table is replaced, not cleared */
/* The C pickler's output buffer grows with a payload (from 4 KiB) and never
 * shrinks: after a payload bigger than this the pickler is initialized again (a
 * fresh 4 KiB buffer and memo, as a new pickler starts), so that a big graph
 * does not leave every later small dump allocating its size. Below it, reusing
 * the grown buffer (at most 1.5 times this) is cheaper than initializing. */
#define FIRST_BUFFER (16 * 1024)

typedef struct {
    PyObject *pickler;
    SinkObject *sink;
    DispatchObject *dispatch;
    /* Its class's version tag when it was made (settings_unchanged): a
     * pickler reads its class's settings once, in __init__. */
    unsigned int tag;
} PoolEntry;

typedef struct {
    PyObject_HEAD
    PyObject *make;       /* make(protocol) -> (pickler, sink, dispatch) */
    PyObject *slow;       /* the Python dumps: every call the fast path does not take */
    PyObject *failed;     /* failed(pickler, obj, exc): raises what the failed dump raises */
    PyObject *dump;       /* _pickle.Pickler.dump */
    PyObject *clear_memo; /* _pickle.Pickler.clear_memo */
    PyObject *init;       /* _pickle.Pickler.__init__ */
    PyObject *switch_ns;  /* a namespace whose "_speedups" is this module, or None to */
    PyObject *module;     /* run the Python hook: then every call takes the slow path */
    /* A dump that raises `restart_type` is made again by
     * restart(pickler, sink, obj, exc, buffer_callback), which returns its
     * payload (NULL: none; see classes_first.py). */
    PyObject *restart_type, *restart;
    PyObject *dict;       /* __dict__: __wrapped__, __doc__, __name__, ... */
    SpeedupsState *st;
    vectorcallfunc vectorcall;
    int signature;
    int deep_limit;       /* a recursion limit above this takes the slow path (0: never) */
    Py_ssize_t max_types; /* a pickler whose type table grew past this is not reused */
    /* Counts clear()s (a reducer table changed): a pickler taken from the pool or
     * made before the last clear() holds an old table and does not go back. */
    unsigned long long generation;
    Py_ssize_t npool[N_PROTOCOLS];
    PoolEntry pool[N_PROTOCOLS][POOL_SIZE];
} DumperObject;

static void
entry_drop(PoolEntry *entry)
{
    Py_CLEAR(entry->pickler);
    Py_CLEAR(entry->sink);
    Py_CLEAR(entry->dispatch);
}

/* What a pickler read of its class when it was made stands for that class's
 * settings now (the C pickler's __init__ reads persistent_id and
 * dispatch_table, graphpickle's __init__ reads reducer_override and more, all
 * through the class; a fresh pickler of each dumps() would read them again):
 * its class's version tag, which CPython sets to 0 whenever an attribute of
 * the class or of one of its bases is set or deleted (PyType_Modified), and
 * never gives again once changed (a counter). `tag` is the one read when the
 * pickler was made; 0 is no tag (CPython may run out of them): not reused. */
static int
settings_unchanged(PyObject *pickler, unsigned int tag)
{
    return tag != 0 && Py_TYPE(pickler)->tp_version_tag == tag;
}

static int
entry_make(DumperObject *self, int protocol, PoolEntry *entry)
{
    PyObject *made = PyObject_CallFunction(self->make, "i", protocol);
    if (made == NULL) {
        return -1;
    }
    if (!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != 3
        || !Py_IS_TYPE(PyTuple_GET_ITEM(made, 1), self->st->sink_type)
        || !Py_IS_TYPE(PyTuple_GET_ITEM(made, 2), self->st->dispatch_type)) {
        Py_DECREF(made);
        PyErr_SetString(PyExc_TypeError, "make() must return (pickler, Sink, Dispatch)");
        return -1;
    }
    entry->pickler = Py_NewRef(PyTuple_GET_ITEM(made, 0));
    entry->sink = (SinkObject *)Py_NewRef(PyTuple_GET_ITEM(made, 1));
    entry->dispatch = (DispatchObject *)Py_NewRef(PyTuple_GET_ITEM(made, 2));
    /* (__init__ looked the settings up on the instance, through the class:
     * which gave the class a tag, if CPython had one left) */
    entry->tag = Py_TYPE(entry->pickler)->tp_version_tag;
    Py_DECREF(made);
    return 0;
}

/* The current exception, normalized, as a new reference (it is cleared). */
static PyObject *
take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
#endif
}

/* Make a used pickler ready for the next dump; -1 if it cannot be reused. */
static int
entry_reset(DumperObject *self, PoolEntry *entry, Py_ssize_t payload_size, int protocol)
{
    SpeedupsState *st = self->st;
    PyObject *done;
    if (payload_size > FIRST_BUFFER) {
        PyObject *callback = protocol >= 5 ? PyObject_GetAttr((PyObject *)entry->sink, st->str_buffer)
                                           : Py_NewRef(Py_None);
        PyObject *proto = PyLong_FromLong(protocol);
        if (callback == NULL || proto == NULL) {
            Py_XDECREF(callback);
            Py_XDECREF(proto);
            return -1;
        }
        /* Pickler.__init__(file, protocol, fix_imports, buffer_callback) */
        PyObject *args[5] = {entry->pickler, (PyObject *)entry->sink, proto, Py_True, callback};
        done = PyObject_Vectorcall(self->init, args, 5, NULL);
        Py_DECREF(proto);
        Py_DECREF(callback);
    }
    else if (payload_size <= SMALL_PAYLOAD) {
        /* Clearing costs the table's size, which a small payload keeps small. */
        done = PyObject_Vectorcall(self->clear_memo, &entry->pickler, 1, NULL);
    }
    else { /* a fresh 8-entry table, so that later small dumps do not clear a big one */
        done = PyObject_SetAttr(entry->pickler, st->str_memo, st->empty_dict) < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (done == NULL) {
        return -1;
    }
    Py_DECREF(done);
    DispatchObject *dispatch = entry->dispatch;
    if (dispatch->touched) {
        dispatch->touched = 0;
        /* Only a by-value reduction writes to the state (its globals map). */
        PyObject *by_value = PyObject_GetAttr(dispatch->state, st->str_by_value);
        if (by_value == NULL) {
            return -1;
        }
        int dirty = PyObject_IsTrue(by_value);
        Py_DECREF(by_value);
        if (dirty < 0) {
            return -1;
        }
        if (dirty) {
            /* Forget what the dump wrote, as a new pickler's state: no globals
             * dict shared with an earlier payload (reducers.PicklerState). */
            PyObject *fresh = PyDict_New();
            int failed = fresh == NULL || PyObject_SetAttr(dispatch->state, st->str_globals_ref, fresh) < 0
                         || PyObject_SetAttr(dispatch->state, st->str_by_value, Py_False) < 0;
            Py_XDECREF(fresh);
            if (failed) {
                return -1;
            }
        }
    }
    if (PyDict_GET_SIZE(dispatch->handlers) > self->max_types) {
        return -1; /* the next pickler made starts a fresh shared table */
    }
    return 0;
}

/* The arguments of one dumps() call, or 0 if the slow path must take it. */
static int
dumper_parse(DumperObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
             PyObject **obj, int *protocol, PyObject **callback)
{
    SpeedupsState *st = self->st;
    PyObject *proto = Py_None, *cb = Py_None, *deterministic = Py_False;
    Py_ssize_t max_positional = self->signature == SIGNATURE_GRAPHPICKLE ? 3 : 1;
    if (nargs < 1 || nargs > max_positional) {
        return 0;
    }
    *obj = args[0];
    if (nargs > 1) {
        proto = args[1];
    }
    if (nargs > 2) {
        cb = args[2];
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        PyObject *value = args[nargs + i];
        if (is_name(name, st->str_protocol) && (nargs < 2 || self->signature != SIGNATURE_GRAPHPICKLE)) {
            proto = value;
        }
        else if (is_name(name, st->str_buffer_callback) && nargs < 3) {
            cb = value;
        }
        else if (self->signature == SIGNATURE_GRAPHPICKLE && is_name(name, st->str_deterministic)) {
            deterministic = value;
        }
        else {
            return 0; /* let Python word the error */
        }
    }
    if (deterministic != Py_False) {
        return 0;
    }
    long p;
    if (self->signature == SIGNATURE_GRAPHPICKLE) {
        if (proto == Py_None) {
            p = N_PROTOCOLS - 1; /* DEFAULT_PROTOCOL */
        }
        else if (PyLong_CheckExact(proto)) {
            p = PyLong_AsLong(proto);
            if (p == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            if (p < 0) {
                p = N_PROTOCOLS - 1; /* HIGHEST_PROTOCOL */
            }
        }
        else {
            return 0;
        }
    }
    else { /* distributed: `protocol or HIGHEST_PROTOCOL`; buffers in band below 5 */
        if (proto == Py_None) {
            p = N_PROTOCOLS - 1;
        }
        else if (PyLong_CheckExact(proto)) {
            p = PyLong_AsLong(proto);
            if (p == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            if (p == 0) {
                p = N_PROTOCOLS - 1;
            }
        }
        else {
            return 0;
        }
        if (p < 5) {
            cb = Py_None;
        }
    }
    if (p < 0 || p >= N_PROTOCOLS || (cb != Py_None && p < 5)) {
        return 0; /* the C pickler's own error, from the slow path */
    }
    if (self->deep_limit && Py_GetRecursionLimit() > self->deep_limit) {
        return 0;
    }
    /* (compared by identity only: borrowed, it may be gone) */
    PyObject *current = PyDict_GetItemWithError(self->switch_ns, st->str_speedups);
    if (current != self->module) {
        PyErr_Clear();
        return 0;
    }
    *protocol = (int)p;
    *callback = cb == Py_None ? NULL : cb;
    return 1;
}

/* The pool and the generation are read and changed only in a critical section
 * on the Dumper (on a build with a GIL, the GIL is that section), never
 * while Python code runs: a pickler is taken out, used, and given back. */
static int
pool_take(DumperObject *self, int protocol, PoolEntry *entry, unsigned long long *generation)
{
    int taken = 0;
    Py_BEGIN_CRITICAL_SECTION(self);
    *generation = self->generation;
    if (self->npool[protocol] > 0) {
        *entry = self->pool[protocol][--self->npool[protocol]];
        taken = 1;
    }
    Py_END_CRITICAL_SECTION();
    return taken;
}

/* Keep a used pickler taken at `generation`: 1, or 0 if the pool is full or
 * was cleared since (the caller drops it). */
static int
pool_give(DumperObject *self, int protocol, PoolEntry *entry, unsigned long long generation)
{
    int kept = 0;
    Py_BEGIN_CRITICAL_SECTION(self);
    if (self->npool[protocol] < POOL_SIZE && generation == self->generation) {
        self->pool[protocol][self->npool[protocol]++] = *entry;
        kept = 1;
    }
    Py_END_CRITICAL_SECTION();
    return kept;
}

static PyObject *
dumper_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    DumperObject *self = (DumperObject *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *obj, *callback;
    int protocol;
    if (!dumper_parse(self, args, nargs, kwnames, &obj, &protocol, &callback)) {
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
    PoolEntry entry;
    /* The generation is read before the entry is taken or made: make() may read
     * a table that a clear() during it (another thread, a reduction) has
     * already dropped. */
    unsigned long long generation;
    int taken = pool_take(self, protocol, &entry, &generation);
    if (taken && !settings_unchanged(entry.pickler, entry.tag)) {
        /* Its class's settings changed since it was made (Pickler.dispatch_table
         * set, say): made again, as a fresh pickler reads them. */
        entry_drop(&entry);
        taken = 0;
    }
    if (!taken && entry_make(self, protocol, &entry) < 0) {
        return NULL;
    }
    Py_XINCREF(callback);
    entry.sink->callback = callback;
    entry.sink->handed = entry.sink->written = entry.sink->peak = 0;
    Py_CLEAR(entry.sink->mark);
    PyObject *dump_args[2] = {entry.pickler, obj};
    PyObject *done = PyObject_Vectorcall(self->dump, dump_args, 2, NULL);
    Py_CLEAR(entry.sink->callback);
    PyObject *data = NULL;
    if (done == NULL && self->restart_type != NULL && PyErr_ExceptionMatches(self->restart_type)) {
        PyObject *exc = take_exception();
        PyObject *restart_args[5] = {entry.pickler, (PyObject *)entry.sink, obj, exc,
                                     callback == NULL ? Py_None : callback};
        done = data = PyObject_Vectorcall(self->restart, restart_args, 5, NULL);
        Py_DECREF(exc);
        Py_CLEAR(entry.sink->callback);
        if (data != NULL && !PyBytes_CheckExact(data)) {
            Py_CLEAR(data);
            done = NULL;
            PyErr_SetString(PyExc_TypeError, "graphpickle: restart() must return bytes");
        }
    }
    if (done == NULL) {
        /* Not reused: what a failed dump leaves behind is of no use. */
        Py_CLEAR(entry.sink->first);
        Py_CLEAR(entry.sink->rest);
        if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_OSError)
            || PyErr_ExceptionMatches(PyExc_MemoryError)) {
            entry_drop(&entry); /* as Pickler.dump: these propagate as they are */
            return NULL;
        }
        PyObject *exc = take_exception();
        PyObject *failed_args[3] = {entry.pickler, obj, exc};
        PyObject *returned = PyObject_Vectorcall(self->failed, failed_args, 3, NULL);
        Py_DECREF(exc);
        entry_drop(&entry);
        if (returned != NULL) {
            Py_DECREF(returned);
            PyErr_SetString(PyExc_SystemError, "graphpickle: failed() returned");
        }
        return NULL;
    }
    if (data == NULL) {
        Py_DECREF(done);
        data = sink_take(self->st, entry.sink);
    }
    /* (a restart's parts grew the pickler's buffer and memo as a payload that size would) */
    if (data == NULL || entry_reset(self, &entry, Py_MAX(PyBytes_GET_SIZE(data), entry.sink->peak), protocol) < 0
        || !settings_unchanged(entry.pickler, entry.tag) || !pool_give(self, protocol, &entry, generation)) {
        entry_drop(&entry);
        if (data != NULL && PyErr_Occurred()) {
            Py_CLEAR(data);
        }
    }
    return data;
}

/* Drop the ready picklers; with `next_generation`, the ones now in a dump do
 * not come back either. Dropping one may run Python code (finalizers), so they
 * are taken out of the pool first. */
static void
dumper_clear_pool(DumperObject *self, int next_generation)
{
    PoolEntry dropped[N_PROTOCOLS * POOL_SIZE];
    int n = 0;
    Py_BEGIN_CRITICAL_SECTION(self);
    self->generation += next_generation;
    for (int p = 0; p < N_PROTOCOLS; p++) {
        while (self->npool[p] > 0) {
            dropped[n++] = self->pool[p][--self->npool[p]];
        }
    }
    Py_END_CRITICAL_SECTION();
    while (n > 0) {
        entry_drop(&dropped[--n]);
    }
}

static PyObject *
dumper_clear_method(DumperObject *self, PyObject *unused)
{
    dumper_clear_pool(self, 1);
    Py_RETURN_NONE;
}

static PyObject *
reduce_by_qualname(PyObject *self, PyObject *unused)
{
    /* Pickled by reference, as the function it stands for. */
    SpeedupsState *st = PyType_GetModuleState(Py_TYPE(self));
    return PyObject_GetAttr(self, st->str_qualname);
}

static PyObject *
dumper_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *make, *slow, *failed, *dump, *clear_memo, *switch_ns, *restart = Py_None;
    int signature, deep_limit;
    Py_ssize_t max_types;
    static char *kwlist[] = {"make",      "slow",       "failed",    "dump",
                             "clear_memo", "signature", "deep_limit", "max_types",
                             "switch",    "restart",   NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOiinO!|$O:Dumper", kwlist, &make, &slow,
                                     &failed, &dump, &clear_memo, &signature, &deep_limit,
                                     &max_types, &PyDict_Type, &switch_ns, &restart)) {
        return NULL;
    }
    if (restart != Py_None
        && (!PyTuple_Check(restart) || PyTuple_GET_SIZE(restart) != 2
            || !PyExceptionClass_Check(PyTuple_GET_ITEM(restart, 0)))) {
        PyErr_SetString(PyExc_TypeError, "restart must be None or (exception type, handler)");
        return NULL;
    }
    SpeedupsState *st = PyType_GetModuleState(type);
    PyObject *module; /* held: the lookup of __init__ below may run Python code */
    if (dict_get_ref(switch_ns, st->str_speedups, &module) == 0) {
        PyErr_SetString(PyExc_KeyError, "switch has no _speedups");
    }
    if (module == NULL) {
        return NULL;
    }
    PyObject *init = NULL;
    if (signature != SIGNATURE_GRAPHPICKLE && signature != SIGNATURE_DISTRIBUTED) {
        PyErr_SetString(PyExc_ValueError, "signature must be 0 (graphpickle) or 1 (distributed)");
    }
    else if (!PyObject_TypeCheck(dump, &PyMethodDescr_Type)) {
        PyErr_SetString(PyExc_TypeError, "dump must be _pickle.Pickler.dump");
    }
    else {
        init = PyObject_GetAttrString((PyObject *)PyDescr_TYPE(dump), "__init__");
    }
    DumperObject *self = init == NULL ? NULL : (DumperObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_XDECREF(init);
        Py_DECREF(module);
        return NULL;
    }
    self->make = Py_NewRef(make);
    self->slow = Py_NewRef(slow);
    self->failed = Py_NewRef(failed);
    self->dump = Py_NewRef(dump);
    self->clear_memo = Py_NewRef(clear_memo);
    self->init = init;
    self->switch_ns = Py_NewRef(switch_ns);
    self->module = module;
    self->st = st;
    self->signature = signature;
    self->deep_limit = deep_limit;
    self->max_types = max_types;
    if (restart != Py_None) {
        self->restart_type = Py_NewRef(PyTuple_GET_ITEM(restart, 0));
        self->restart = Py_NewRef(PyTuple_GET_ITEM(restart, 1));
    }
    self->vectorcall = dumper_vectorcall;
    return (PyObject *)self;
}

static int
dumper_traverse(DumperObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->make);
    Py_VISIT(self->slow);
    Py_VISIT(self->failed);
    Py_VISIT(self->dump);
    Py_VISIT(self->clear_memo);
    Py_VISIT(self->init);
    Py_VISIT(self->switch_ns);
    Py_VISIT(self->module);
    Py_VISIT(self->restart_type);
    Py_VISIT(self->restart);
    Py_VISIT(self->dict);
    for (int p = 0; p < N_PROTOCOLS; p++) {
        for (Py_ssize_t i = 0; i < self->npool[p]; i++) {
            Py_VISIT(self->pool[p][i].pickler);
            Py_VISIT(self->pool[p][i].sink);
            Py_VISIT(self->pool[p][i].dispatch);
        }
    }
    return 0;
}

static int
dumper_clear(DumperObject *self)
{
    dumper_clear_pool(self, 0);
    Py_CLEAR(self->make);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->dump);
    Py_CLEAR(self->clear_memo);
    Py_CLEAR(self->init);
    Py_CLEAR(self->switch_ns);
    Py_CLEAR(self->module);
    Py_CLEAR(self->restart_type);
    Py_CLEAR(self->restart);
    Py_CLEAR(self->dict);
    return 0;
}

static void
dumper_dealloc(DumperObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    dumper_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
dumper_pooled(DumperObject *self, PyObject *unused)
{
    Py_ssize_t total = 0;
    Py_BEGIN_CRITICAL_SECTION(self);
    for (int p = 0; p < N_PROTOCOLS; p++) {
        total += self->npool[p];
    }
    Py_END_CRITICAL_SECTION();
    return PyLong_FromSsize_t(total);
}

static PyMethodDef dumper_methods[] = {
    {"clear", (PyCFunction)dumper_clear_method, METH_NOARGS,
     PyDoc_STR("clear(): drop the ready picklers (the reducer tables changed).")},
    {"pooled", (PyCFunction)dumper_pooled, METH_NOARGS,
     PyDoc_STR("pooled(): how many ready picklers are kept.")},
    {"__reduce__", (PyCFunction)reduce_by_qualname, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef with_dict_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef dumper_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(DumperObject, vectorcall), Py_READONLY, NULL},
    {"__dictoffset__", Py_T_PYSSIZET, offsetof(DumperObject, dict), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot dumper_slots[] = {
    {Py_tp_doc, (void *)PyDoc_STR("Dumper(make, slow, failed, dump, clear_memo, signature, "
                                  "deep_limit, max_types, switch, *, restart=None): dumps() on pooled picklers.")},
    {Py_tp_new, dumper_new},
    {Py_tp_dealloc, dumper_dealloc},
    {Py_tp_traverse, dumper_traverse},
    {Py_tp_clear, dumper_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_getattro, PyObject_GenericGetAttr},
    {Py_tp_setattro, PyObject_GenericSetAttr},
    {Py_tp_methods, dumper_methods},
    {Py_tp_members, dumper_members},
    {Py_tp_getset, with_dict_getset},
    {0, NULL},
};

static PyType_Spec dumper_spec = {
    .name = "graphpickle.core._speedups.Dumper",
    .basicsize = sizeof(DumperObject),
    .flags = TYPE_FLAGS | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = dumper_slots,
};

static int bytearray8_overruns(const unsigned char *start, const unsigned char *end);

/* 1 if `data` is bytes-like and holds a BYTEARRAY8 the C unpickler must not read
 * (see bytearray8_overruns), 0 if not or not contiguous bytes (loads says why),
 * -1 with an exception that is no Exception set. */
static int
data_overruns(PyObject *data)
{
    if (PyBytes_CheckExact(data)) {
        const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(data);
        return bytearray8_overruns(start, start + PyBytes_GET_SIZE(data));
    }
    if (!PyObject_CheckBuffer(data)) {
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            return -1; /* KeyboardInterrupt and the like */
        }
        /* Not contiguous bytes (numpy says ValueError, memoryview BufferError):
         * the unpickler, asking the same, raises its own error. */
        PyErr_Clear();
        return 0;
    }
    const unsigned char *start = view.buf;
    int overruns = bytearray8_overruns(start, start + view.len);
    PyBuffer_Release(&view);
    return overruns;
}

/* The first byte of a payload in two parts (classes_first.MARKER: no pickle
 * opcode). */
#define CLASSES_FIRST_MARKER 0xFF

/* Whether `data` (bytes, bytearray or a contiguous memoryview) starts with
 * CLASSES_FIRST_MARKER; anything else is not looked at (0). */
static int
starts_classes_first(PyObject *data)
{
    const char *start = NULL;
    Py_ssize_t size = 0;
    if (PyBytes_CheckExact(data)) {
        start = PyBytes_AS_STRING(data);
        size = PyBytes_GET_SIZE(data);
    }
    else if (PyByteArray_CheckExact(data)) {
        start = PyByteArray_AS_STRING(data);
        size = PyByteArray_GET_SIZE(data);
    }
    else if (PyMemoryView_Check(data)) { /* (through the buffer protocol: it may be released) */
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear(); /* the load says what is wrong with it */
            return 0;
        }
        int marked = view.len > 0 && ((unsigned char *)view.buf)[0] == CLASSES_FIRST_MARKER;
        PyBuffer_Release(&view);
        return marked;
    }
    return size > 0 && (unsigned char)start[0] == CLASSES_FIRST_MARKER;
}

typedef struct {
    PyObject_HEAD
    PyObject *loads;  /* _pickle.loads */
    PyObject *slow;   /* the Python loads: every call the fast path does not take */
    PyObject *failed; /* failed(exc, data): raises exc, with a note in words */
    PyObject *dict;
    SpeedupsState *st;
    vectorcallfunc vectorcall;
    int signature;
} LoaderObject;

static PyObject *
loader_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    LoaderObject *self = (LoaderObject *)op;
    SpeedupsState *st = self->st;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs != 1) {
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
    PyObject *result;
    if (self->signature == SIGNATURE_GRAPHPICKLE) {
        PyObject *data = args[0];
        if (!PyBytes_CheckExact(data) && !PyByteArray_CheckExact(data) && !PyMemoryView_Check(data)) {
            /* Another exporter (a Python __buffer__, 3.12+) may give other bytes to
             * the check and to the unpickler: the Python loads reads one view. */
            return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
        }
#if PY_VERSION_HEX < 0x030F0000 /* 3.15's unpickler reads such bytes in pieces: overrun.NEEDED */
        int refused = data_overruns(data);
        if (refused) { /* the Python loads refuses it in words (or passes on an error) */
            return refused < 0 ? NULL : PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
        }
#endif
        /* pickle.loads's own keywords go to it as they are; `allowed` is not its. */
        for (Py_ssize_t i = 0; i < nkw; i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            if (!is_name(name, st->str_buffers) && !is_name(name, st->str_fix_imports)
                && !is_name(name, st->str_encoding) && !is_name(name, st->str_errors)) {
                return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
            }
        }
        result = PyObject_Vectorcall(self->loads, args, nargsf, kwnames);
    }
    else { /* distributed's loads(x, *, buffers=()): buffers only when there are some */
        if (starts_classes_first(args[0])) {
            return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
        }
        PyObject *buffers = NULL;
        if (nkw == 1 && is_name(PyTuple_GET_ITEM(kwnames, 0), st->str_buffers)) {
            buffers = args[1];
        }
        else if (nkw) {
            return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
        }
        int some = buffers == NULL ? 0 : PyObject_IsTrue(buffers);
        if (some < 0) {
            return NULL;
        }
        result = some ? PyObject_Vectorcall(self->loads, args, nargsf, kwnames)
                      : PyObject_Vectorcall(self->loads, args, 1, NULL);
    }
    if (result != NULL || !PyErr_ExceptionMatches(PyExc_Exception)) {
        return result;
    }
    /* failed(exc, data) raises, or returns what loads gives instead (distributed's
     * loads: a task that raises, for a task's payload). */
    PyObject *exc = take_exception();
    PyObject *failed_args[2] = {exc, args[0]};
    PyObject *returned = PyObject_Vectorcall(self->failed, failed_args, 2, NULL);
    Py_DECREF(exc);
    return returned;
}

static PyObject *
loader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *loads, *slow, *failed;
    int signature;
    static char *kwlist[] = {"loads", "slow", "failed", "signature", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOi:Loader", kwlist, &loads, &slow, &failed,
                                     &signature)) {
        return NULL;
    }
    if (signature != SIGNATURE_GRAPHPICKLE && signature != SIGNATURE_DISTRIBUTED) {
        PyErr_SetString(PyExc_ValueError, "signature must be 0 (graphpickle) or 1 (distributed)");
        return NULL;
    }
    LoaderObject *self = (LoaderObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->loads = Py_NewRef(loads);
    self->slow = Py_NewRef(slow);
    self->failed = Py_NewRef(failed);
    self->st = PyType_GetModuleState(type);
    self->signature = signature;
    self->vectorcall = loader_vectorcall;
    return (PyObject *)self;
}

static int
loader_traverse(LoaderObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->loads);
    Py_VISIT(self->slow);
    Py_VISIT(self->failed);
    Py_VISIT(self->dict);
    return 0;
}

static int
loader_clear(LoaderObject *self)
{
    Py_CLEAR(self->loads);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->dict);
    return 0;
}

static void
loader_dealloc(LoaderObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    loader_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef loader_methods[] = {
    {"__reduce__", (PyCFunction)reduce_by_qualname, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef loader_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(LoaderObject, vectorcall), Py_READONLY, NULL},
    {"__dictoffset__", Py_T_PYSSIZET, offsetof(LoaderObject, dict), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot loader_slots[] = {
    {Py_tp_doc, (void *)PyDoc_STR("Loader(loads, slow, failed, signature): loads() without a "
                                  "Python call.")},
    {Py_tp_new, loader_new},
    {Py_tp_dealloc, loader_dealloc},
    {Py_tp_traverse, loader_traverse},
    {Py_tp_clear, loader_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_getattro, PyObject_GenericGetAttr},
    {Py_tp_setattro, PyObject_GenericSetAttr},
    {Py_tp_methods, loader_methods},
    {Py_tp_members, loader_members},
    {Py_tp_getset, with_dict_getset},
    {0, NULL},
};

static PyType_Spec loader_spec = {
    .name = "graphpickle.core._speedups.Loader",
    .basicsize = sizeof(LoaderObject),
    .flags = TYPE_FLAGS | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = loader_slots,
};

/* Whether the byte at p, read as BYTEARRAY8, declares more bytes than follow
 * (and few enough for the unpickler to try: past PY_SSIZE_T_MAX it raises
 * OverflowError before it allocates). */
static int
bytearray8_past_end(const unsigned char *p, const unsigned char *end)
{
    if (*p != 0x96 || end - p <= 8) {
        return 0;
    }
    unsigned long long length = read_le(p + 1, 8);
    return length > (unsigned long long)(end - p - 9) && length <= (unsigned long long)PY_SSIZE_T_MAX;
}

/* The first byte at or after p that bytearray8_past_end accepts, or NULL. */
static const unsigned char *
next_suspect(const unsigned char *p, const unsigned char *end)
{
    while (p < end && (p = memchr(p, 0x96, (size_t)(end - p))) != NULL) {
        if (bytearray8_past_end(p, end)) {
            return p;
        }
        p++;
    }
    return NULL;
}

/* Whether the unpickler, reading the pickle at [start, end), would meet a
 * BYTEARRAY8 that declares more bytes than the data holds. CPython's C
 * unpickler (3.11-3.14) allocates the bytearray before it reads: when that
 * allocation fails, the half-made bytearray is freed with an uninitialized
 * export count, which prints a SystemError or crashes the process (3.15
 * reads in pieces: overrun.NEEDED). So loads()
 * refuses such data before the unpickler sees it, as "pickle data was truncated"
 * (what the unpickler says when the allocation succeeds).
 *
 * Only a 0x96 byte followed by such a length (a suspect: memchr finds them) can
 * be one; the opcodes are walked only up to each suspect, to tell whether it is
 * an opcode or inside another's argument. Most payloads have no suspect; one
 * with a suspect costs a walk to its last suspect. */
static int
bytearray8_overruns(const unsigned char *start, const unsigned char *end)
{
    const unsigned char *p = start;
    const unsigned char *suspect = next_suspect(start, end);
    while (suspect != NULL) {
        while (p < suspect) {
            if (*p == '.') {
                return 0; /* STOP: the unpickler reads no further */
            }
            p = skip_opcode(p, end);
            if (p == NULL) {
                return 0; /* the unpickler stops with an error before */
            }
        }
        if (p == suspect) {
            return 1;
        }
        suspect = next_suspect(p, end); /* it was inside an argument */
    }
    return 0;
}

/* bytearray8_overruns(data): the check above, for the Python side (False for
 * what is not contiguous bytes, as data_overruns says). */
static PyObject *
bytearray8_overruns_py(PyObject *module, PyObject *data)
{
    int overruns = data_overruns(data);
    return overruns < 0 ? NULL : PyBool_FromLong(overruns);
}

/* set_session_reductions(block_reduction, subimport, function_blocks,
 * held_globals_type, session_type, function_ref): what a dump on a connection
 * answers with (see SpeedupsState); function_blocks None: the Python function
 * answers for every function. */
static PyObject *
set_session_reductions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    SpeedupsState *st = module_state(module);
    if (nargs != 6 || (args[2] != Py_None && !PyDict_CheckExact(args[2])) || !PyType_Check(args[3])
        || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "set_session_reductions(block_reduction, subimport, function_blocks: dict "
                        "| None, held_globals_type: type, session_type: type, function_ref)");
        return NULL;
    }
    Py_XSETREF(st->session_reduction, Py_NewRef(args[0]));
    Py_XSETREF(st->session_subimport, Py_NewRef(args[1]));
    Py_XSETREF(st->function_blocks, args[2] == Py_None ? NULL : Py_NewRef(args[2]));
    Py_XSETREF(st->held_globals_type, Py_NewRef(args[3]));
    Py_XSETREF(st->session_type, Py_NewRef(args[4]));
    Py_XSETREF(st->function_ref_object, Py_NewRef(args[5]));
    Py_RETURN_NONE;
}

/* set_remembered(code_handler, builtin_types, codes, functions, captures_globals,
 * missing): the tables above. */
static PyObject *
set_remembered(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    SpeedupsState *st = module_state(module);
    if (nargs != 6 || !PyDict_CheckExact(args[1]) || !PyDict_CheckExact(args[2])
        || !PyDict_CheckExact(args[3]) || !PyDict_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "set_remembered(code_handler, builtin_types: dict, codes: dict, "
                        "functions: dict, captures_globals: dict, missing)");
        return NULL;
    }
    PyObject **tables[6] = {&st->code_handler, &st->builtin_types,    &st->codes,
                            &st->functions,    &st->captures_globals, &st->missing_marker};
    for (int i = 0; i < 6; i++) {
        Py_XSETREF(*tables[i], Py_NewRef(args[i]));
    }
    Py_RETURN_NONE;
}

/* set_function_layouts(builtins, layouts, slow): what make_function needs
 * (blocks.py gives them at import). */
static PyObject *
set_function_layouts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    SpeedupsState *st = module_state(module);
    if (nargs != 3 || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_function_layouts(builtins, layouts: tuple, slow)");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args[1]) > MAX_LAYOUTS) {
        PyErr_SetString(PyExc_ValueError, "graphpickle: more function layouts than make_function reads");
        return NULL;
    }
    Py_ssize_t slots[MAX_LAYOUTS][LAYOUT_APART]; /* (the state's once all are found) */
    for (Py_ssize_t layout = 0; layout < PyTuple_GET_SIZE(args[1]); layout++) {
        PyObject *keys = PyTuple_GET_ITEM(args[1], layout);
        for (int apart = 0; apart < LAYOUT_APART; apart++) {
            slots[layout][apart] = -1;
            for (Py_ssize_t i = 0; PyTuple_CheckExact(keys) && i < PyTuple_GET_SIZE(keys); i++) {
                PyObject *key = PyTuple_GET_ITEM(keys, i);
                if (PyUnicode_CheckExact(key)
                    && PyUnicode_CompareWithASCIIString(key, APART_SLOTS[apart]) == 0) {
                    slots[layout][apart] = i;
                }
            }
            if (slots[layout][apart] < 0) {
                PyErr_Format(PyExc_ValueError, "graphpickle: a function layout without %s",
                             APART_SLOTS[apart]);
                return NULL;
            }
        }
    }
    memcpy(st->layout_slots, slots, sizeof(slots));
    Py_XSETREF(st->function_builtins, Py_NewRef(args[0]));
    Py_XSETREF(st->function_layouts, Py_NewRef(args[1]));
    Py_XSETREF(st->make_function_slow, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* target.update(other), as the method does it: for an exact dict updated
 * from an exact dict that is PyDict_Update (dict.update's own path), with no
 * method call; anything else calls the method. */
static int
update_like_method(SpeedupsState *st, PyObject *target, PyObject *other)
{
    if (PyDict_CheckExact(target) && PyDict_CheckExact(other)) {
        return PyDict_Update(target, other);
    }
    PyObject *done = PyObject_CallMethodOneArg(target, st->str_update, other);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* blocks.make_function(code, base_globals, closure, layout, attributes, *slot_values):
 * _cloudpickle_internals.make_function_as_loaded step for step (cloudpickle's
 * _make_function, then _function_setstate), through the same generic calls
 * (an update of an exact dict from an exact dict is PyDict_Update, the path
 * dict.update takes for it). Arguments of another shape go to the Python
 * function, which says what is wrong. */
static PyObject *
make_function(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    SpeedupsState *st = module_state(module);
    if (st->make_function_slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "graphpickle: make_function before set_function_layouts");
        return NULL;
    }
    Py_ssize_t layout = nargs >= 5 && PyLong_CheckExact(args[3]) ? PyLong_AsSsize_t(args[3]) : -1;
    if (layout == -1 && PyErr_Occurred()) {
        PyErr_Clear();
    }
    PyObject *keys = layout >= 0 && layout < PyTuple_GET_SIZE(st->function_layouts)
                         ? PyTuple_GET_ITEM(st->function_layouts, layout)
                         : NULL;
    if (keys == NULL || !PyTuple_CheckExact(keys) || PyTuple_GET_SIZE(keys) != nargs - 5
        || !PyDict_CheckExact(args[1])) {
        return PyObject_Vectorcall(st->make_function_slow, args, nargs, NULL);
    }
    /* Held, and copied: Python code run below (a __del__, an update) could set
     * the layouts again. */
    Py_ssize_t apart[LAYOUT_APART];
    memcpy(apart, st->layout_slots[layout], sizeof(apart));
    keys = Py_NewRef(keys);
    PyObject *builtins = Py_NewRef(st->function_builtins);
    PyObject *code = args[0], *globals = args[1], *closure = args[2], *attributes = args[4];
    PyObject *const *values = args + 5;
    PyObject *func = NULL, *result = NULL;
    if (PyDict_SetItem(globals, st->str_builtins, builtins) < 0) {
        goto finally;
    }
    PyObject *new_args[5] = {code, globals, Py_None, Py_None, closure};
    func = PyObject_Vectorcall((PyObject *)&PyFunction_Type, new_args, 5, NULL);
    if (func == NULL) {
        goto finally;
    }
    /* func.__dict__.update(attributes): nothing to do for an empty exact dict */
    if (!PyDict_CheckExact(attributes) || PyDict_GET_SIZE(attributes) != 0) {
        PyObject *dict = PyObject_GetAttr(func, st->str_dict);
        int failed = dict == NULL || update_like_method(st, dict, attributes) < 0;
        Py_XDECREF(dict);
        if (failed) {
            goto finally;
        }
    }
    PyObject *slot_globals = values[apart[APART_GLOBALS]];
    PyObject *slot_closure = values[apart[APART_CLOSURE]];
    /* globals.update(slot globals), then __builtins__ again */
    if (update_like_method(st, globals, slot_globals) < 0
        || PyDict_SetItem(globals, st->str_builtins, builtins) < 0) {
        goto finally;
    }
    if (slot_closure != Py_None) { /* each cell's contents into the new function's cells */
        PyObject *targets = PyObject_GetAttr(func, st->str_closure);
        PyObject *cells = targets == NULL ? NULL : PyObject_GetIter(slot_closure);
        PyObject *cell;
        Py_ssize_t i = 0;
        int failed = cells == NULL;
        while (!failed && (cell = PyIter_Next(cells)) != NULL) {
            PyObject *value = PyObject_GetAttr(cell, st->str_cell_contents);
            Py_DECREF(cell);
            if (value == NULL) {
                failed = !PyErr_ExceptionMatches(PyExc_ValueError); /* an empty cell */
                if (!failed) {
                    PyErr_Clear();
                }
            }
            else {
                PyObject *target = PySequence_GetItem(targets, i);
                failed = target == NULL
                         || PyObject_SetAttr(target, st->str_cell_contents, value) < 0;
                Py_XDECREF(target);
                Py_DECREF(value);
            }
            i++;
        }
        failed = failed || PyErr_Occurred() != NULL;
        Py_XDECREF(cells);
        Py_XDECREF(targets);
        if (failed) {
            goto finally;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) { /* the other slots, in order */
        if (i == apart[APART_GLOBALS] || i == apart[APART_CLOSURE]
            || i == apart[APART_SUBMODULES]) {
            continue;
        }
        if (PyObject_SetAttr(func, PyTuple_GET_ITEM(keys, i), values[i]) < 0) {
            goto finally;
        }
    }
    result = Py_NewRef(func);
finally:
    Py_XDECREF(func);
    Py_DECREF(builtins);
    Py_DECREF(keys);
    return result;
}

/* A function block's parts as connection.Receiver holds them: (code, layout,
 * name, qualname, module, doc, items). */
#define HELD_PARTS 7
/* function_ref(digest, *parts) takes the block's digest and none, or these. */
#define SENT_PARTS 9

/* set_function_refs(receiver_var, receiver_type, slow, held_parts, sent_parts):
 * what function_ref needs (blocks.py gives them at import). */
static PyObject *
set_function_refs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    SpeedupsState *st = module_state(module);
    if (nargs != 5 || !PyContextVar_CheckExact(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_function_refs(receiver_var: ContextVar, "
                                         "receiver_type: type, slow, held_parts, sent_parts)");
        return NULL;
    }
    /* (the Python function's shapes, which function_ref spells out below) */
    if (PyLong_AsSsize_t(args[3]) != HELD_PARTS || PyLong_AsSsize_t(args[4]) != SENT_PARTS) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "graphpickle: function blocks of another shape");
        }
        return NULL;
    }
    Py_XSETREF(st->receiver_var, Py_NewRef(args[0]));
    Py_XSETREF(st->receiver_type, Py_NewRef(args[1]));
    Py_XSETREF(st->function_ref_slow, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* The parts the receiving connection holds under `digest` (a new reference),
 * or NULL without an exception for anything else: the Python function then
 * says what is wrong. */
static PyObject *
held_function_block(SpeedupsState *st, PyObject *digest)
{
    PyObject *receiver = NULL, *held = NULL, *found = NULL, *parts = NULL;
    if (PyContextVar_Get(st->receiver_var, NULL, &receiver) < 0) {
        return NULL;
    }
    /* (connection.Receiver itself, whose `held` is an OrderedDict: what its
     * `function` method reads with dict.get) */
    if (receiver == NULL || !Py_IS_TYPE(receiver, (PyTypeObject *)st->receiver_type)) {
        goto finally;
    }
    held = PyObject_GetAttr(receiver, st->str_held);
    if (held == NULL || !PyDict_Check(held) || dict_get_ref(held, digest, &found) < 0) {
        goto finally; /* (an error, if any, is raised) */
    }
    if (found != NULL && PyTuple_CheckExact(found) && PyTuple_GET_SIZE(found) == 2
        && PyTuple_CheckExact(PyTuple_GET_ITEM(found, 0))
        && PyTuple_GET_SIZE(PyTuple_GET_ITEM(found, 0)) == HELD_PARTS) {
        parts = Py_NewRef(PyTuple_GET_ITEM(found, 0));
    }
finally:
    Py_XDECREF(found);
    Py_XDECREF(held);
    Py_XDECREF(receiver);
    return PyErr_Occurred() ? NULL : parts;
}

/* blocks.function_ref(digest, *parts): blocks._function of the function block
 * the receiving connection holds under `digest`, as the Python function makes
 * it; a miss, or anything of another shape, goes to the Python function. */
static PyObject *
function_ref(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    SpeedupsState *st = module_state(module);
    if (st->function_ref_slow == NULL || st->make_function_slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "graphpickle: function_ref before set_function_refs");
        return NULL;
    }
    PyObject *held = NULL;
    if (nargs >= 1 && PyBytes_CheckExact(args[0]) && (nargs == 1 || nargs == 1 + SENT_PARTS)) {
        held = held_function_block(st, args[0]);
        if (held == NULL && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (held == NULL) {
        return PyObject_Vectorcall(st->function_ref_slow, args, nargs, NULL);
    }
    PyObject *result;
#define HELD(i) PyTuple_GET_ITEM(held, i)
    if (nargs == 1) { /* dict(items): the payload's base-globals dict */
        result = PyObject_CallOneArg((PyObject *)&PyDict_Type, HELD(6));
    }
    else { /* blocks._function's call of make_function, argument for argument */
        PyObject *const *sent = args + 1;
        PyObject *call[5 + 10] = {
            HELD(0), sent[0], sent[1], HELD(1), sent[2],  /* code, globals, closure, layout, attributes */
            HELD(2), HELD(3), sent[3], sent[4], sent[5],  /* name, qualname, annotations, kwdefaults, defaults */
            HELD(4), HELD(5), sent[6], sent[7], sent[8],  /* module, doc, closure, submodules, globals */
        };
        result = make_function(module, call, 15);
    }
#undef HELD
    Py_DECREF(held);
    return result;
}

/* blocks.subimport(name): `__import__(name)` (builtins' __import__, read at
 * each call as the Python function reads it), then `sys.modules[name]`. */
static PyObject *
subimport(PyObject *module, PyObject *name)
{
    SpeedupsState *st = module_state(module);
    PyObject *import = NULL, *modules = NULL, *result = NULL;
    if (st->builtins_dict == NULL || st->sys_dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "graphpickle: subimport after its module was cleared");
        return NULL;
    }
    if (dict_get_ref(st->builtins_dict, st->str_import, &import) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_NameError, "name '%U' is not defined", st->str_import);
        }
        return NULL;
    }
    PyObject *imported = PyObject_CallOneArg(import, name);
    Py_DECREF(import);
    if (imported == NULL) {
        return NULL;
    }
    Py_DECREF(imported);
    if (dict_get_ref(st->sys_dict, st->str_modules, &modules) <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_AttributeError, "module 'sys' has no attribute 'modules'");
        }
        return NULL;
    }
    result = PyObject_GetItem(modules, name);
    Py_DECREF(modules);
    return result;
}

static PyObject *
set_by_reference_policy(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    SpeedupsState *st = module_state(module);
    if (nargs != 5 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "set_by_reference_policy(registries: list[set], "
                                         "function_handler, class_handler, module_handler, "
                                         "subimport)");
        return NULL;
    }
    Py_SETREF(st->by_value_registries, Py_NewRef(args[0]));
    Py_XSETREF(st->function_handler, Py_NewRef(args[1]));
    Py_XSETREF(st->class_handler, Py_NewRef(args[2]));
    Py_XSETREF(st->module_handler, Py_NewRef(args[3]));
    Py_XSETREF(st->subimport, Py_NewRef(args[4]));
    PyDict_Clear(st->by_reference);
    Py_RETURN_NONE;
}

/* ---- what a remembered by-value reduction depends on -------------------
 *
 * function_snapshot(func, names, missing): every object a function's by-value
 * reduction is built from, as one flat tuple (SNAPSHOT_FIELDS, then the value
 * of each global in `names`, each closure cell's contents, and the keys and
 * values of its __dict__; `missing` where there is none). No Python code runs
 * while it is taken, so it is one consistent state. same_objects(a, b): whether
 * two flat tuples hold the very same objects, position by position; only exact
 * ints compare by value (pickle writes them by value, never as a memo
 * reference). reducers.py remembers a reduction it verified was built from a
 * snapshot, and reuses it while a new snapshot is the same objects. */
static PyObject *
or_missing(PyObject *value, PyObject *missing)
{
    return value == NULL ? missing : value;
}

static PyObject *
function_snapshot(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyFunction_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "function_snapshot(func, names: tuple, missing)");
        return NULL;
    }
    PyFunctionObject *func = (PyFunctionObject *)args[0];
    PyObject *names = args[1], *missing = args[2];
    Py_ssize_t n_names = PyTuple_GET_SIZE(names);
    PyObject *closure = func->func_closure;
    Py_ssize_t n_cells = closure == NULL ? 0 : PyTuple_GET_SIZE(closure);
    /* Held: a lookup below may run Python code (a name that is no exact str, a
     * globals dict with such keys), which may replace the function's __dict__. */
    PyObject *attributes = Py_XNewRef(func->func_dict);
    Py_ssize_t n_attributes = attributes == NULL ? 0 : PyDict_GET_SIZE(attributes);
    Py_ssize_t size = SNAPSHOT_FIXED + n_names + n_cells + 2 * n_attributes;
    PyObject *snapshot = PyTuple_New(size);
    if (snapshot == NULL) {
        Py_XDECREF(attributes);
        return NULL;
    }
    /* Deferred annotations (3.14+) travel as their __annotate__, never read
     * (_cloudpickle_internals.function_state): it stands for them here. */
    PyObject *annotations = func->func_annotations;
#if PY_VERSION_HEX >= 0x030E0000
    if (func->func_annotate != NULL && func->func_annotate != Py_None) {
        annotations = func->func_annotate;
    }
#endif
    PyObject *fields[SNAPSHOT_FIXED] = {
        func->func_code, func->func_defaults, func->func_kwdefaults, func->func_name,
        func->func_qualname, func->func_module, func->func_doc, annotations,
        closure,
    };
    Py_ssize_t at = 0;
    for (; at < SNAPSHOT_FIXED; at++) { /* an unset field reads as None */
        PyTuple_SET_ITEM(snapshot, at, Py_NewRef(or_missing(fields[at], Py_None)));
    }
    for (Py_ssize_t i = 0; i < n_names; i++) {
        /* Exact str keys (names come from code): no Python code runs. */
        PyObject *value = PyDict_GetItemWithError(func->func_globals, PyTuple_GET_ITEM(names, i));
        if (value == NULL && PyErr_Occurred()) {
            Py_DECREF(snapshot);
            Py_XDECREF(attributes);
            return NULL;
        }
        PyTuple_SET_ITEM(snapshot, at++, Py_NewRef(or_missing(value, missing)));
    }
    for (Py_ssize_t i = 0; i < n_cells; i++) {
        PyObject *cell = PyTuple_GET_ITEM(closure, i);
        PyObject *contents = PyCell_Check(cell) ? PyCell_GET(cell) : NULL;
        PyTuple_SET_ITEM(snapshot, at++, Py_NewRef(or_missing(contents, missing)));
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (attributes != NULL && at < size && PyDict_Next(attributes, &pos, &key, &value)) {
        PyTuple_SET_ITEM(snapshot, at++, Py_NewRef(key));
        PyTuple_SET_ITEM(snapshot, at++, Py_NewRef(value));
    }
    int changed = at != size || func->func_dict != attributes
                  || (attributes != NULL && PyDict_GET_SIZE(attributes) != n_attributes);
    Py_XDECREF(attributes);
    if (changed) { /* (a lookup ran Python code that replaced or resized the function's __dict__) */
        Py_DECREF(snapshot);
        PyErr_SetString(PyExc_RuntimeError, "function_snapshot: __dict__ changed size");
        return NULL;
    }
    return snapshot;
}

static int
same_items(PyObject *a, PyObject *b)
{
    if (a == b) {
        return 1;
    }
    if (!PyTuple_CheckExact(a) || !PyTuple_CheckExact(b) || PyTuple_GET_SIZE(a) != PyTuple_GET_SIZE(b)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); i++) {
        PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
        if (x == y) {
            continue;
        }
        if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y)) {
            return 0;
        }
        int equal = PyObject_RichCompareBool(x, y, Py_EQ); /* exact ints: no Python code */
        if (equal != 1) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

static PyObject *
same_objects(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "same_objects(a, b)");
        return NULL;
    }
    return PyBool_FromLong(same_items(args[0], args[1]));
}

/* ---- what a classes' part the receiver reuses is made of ---------------
 *
 * held_snapshot(probes, missing): what each probe reads now, as one flat tuple;
 * held_unchanged(probes, reading, missing): whether it would read `reading`, the
 * very same objects position by position (sizes, exact ints, by value), read
 * and compared as it goes (it stops at the first change). held_classes.py
 * builds the probes, and reuses a loaded classes' part while they read the
 * same. No Python code of the user's runs: the probes read the fields of
 * functions, cells, exact dicts, lists and sets (a set's whole table), the
 * slots of plain objects (classes that define no hooks: checked when the
 * probes were made), classes' dicts, and globals and modules (by dict lookups
 * only, in dicts keyed by exact strs only, each object held while the next is
 * looked up: emit_global). A probe is a tuple (kind, target[, argument]);
 * `missing` stands for what is not there. */
/* The CPython fields some probes read in place (a set's, the head of a dict's
 * keys table, a type's table of subclasses) are as read below on 3.11-3.15 with
 * the GIL; SET_LAYOUT, DICT_LAYOUT and SUBCLASS_LAYOUT say whether this build
 * reads each, and held_classes.py checks at import that each tells apart what
 * it must. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x03100000 && !defined(Py_GIL_DISABLED)
#define FIELDS_READ 1
#else
#define FIELDS_READ 0
#endif

enum {
    PROBE_ATTR, PROBE_ITEMS, PROBE_CLASS_ITEMS, PROBE_LIST, PROBE_CELL, PROBE_GLOBAL, PROBE_MODULE,
    PROBE_ANNOTATIONS, PROBE_SET, PROBE_FUNCTION, PROBE_PLAIN, PROBE_MODULES, PROBE_ABSTRACT,
    PROBE_SUBCLASSES, PROBE_KEY, PROBE_TUPLE
};

/* The settable fields of a function, as PROBE_FUNCTION reads them (held_classes.py
 * uses it only if these are the settable attributes it finds on a function). */
static const char *function_fields[] = {
    "__code__", "__defaults__", "__kwdefaults__", "__doc__", "__name__", "__qualname__",
    "__module__", "__dict__", "__annotations__",
#if PY_VERSION_HEX >= 0x030C0000
    "__type_params__",
#endif
#if PY_VERSION_HEX >= 0x030E0000
    "__annotate__",
#endif
};
#define FUNCTION_FIELDS ((Py_ssize_t)(sizeof(function_fields) / sizeof(function_fields[0])))

static int
is_dunder(PyObject *name)
{
    return PyUnicode_GET_LENGTH(name) >= 2 && PyUnicode_READ_CHAR(name, 0) == '_'
           && PyUnicode_READ_CHAR(name, 1) == '_';
}

/* Where the objects probes read go: appended to `out` (a snapshot), or compared
 * with `reading` (`same` drops to 0 at the first difference). */
typedef struct {
    PyObject *out, *reading, *missing;
    Py_ssize_t at;
    int same;
    PyObject *modules; /* the interpreter's modules dict, read once and held */
    PyObject *str_keyed[8]; /* dicts found keyed by exact strs only in this reading (borrowed: */
    int n_str_keyed;        /* nothing runs code while the probes read, so none changes) */
    PyObject *str_spec, *str_modules; /* "__spec__", "modules" (the module state's) */
    int quiet; /* no event of the watched dicts since `reading`: their items are passed over */
} Probed;

static int
emit(Probed *p, PyObject *value) /* (borrowed; NULL: missing) */
{
    if (value != NULL && value == p->missing) {
        /* (an object a task put there: it would read as nothing there) */
        PyErr_SetString(PyExc_ValueError, "held: a probe read the marker of what is missing");
        return -1;
    }
    value = value == NULL ? p->missing : value;
    if (p->out != NULL) {
        return PyList_Append(p->out, value);
    }
    PyObject *then = p->at < PyTuple_GET_SIZE(p->reading) ? PyTuple_GET_ITEM(p->reading, p->at) : NULL;
    p->at++;
    if (value != then
        && !(then != NULL && PyLong_CheckExact(value) && PyLong_CheckExact(then)
             && PyObject_RichCompareBool(value, then, Py_EQ) == 1)) {
        p->same = 0;
    }
    return 0;
}

static int
emit_new(Probed *p, PyObject *value) /* (a new reference: NULL is an error) */
{
    if (value == NULL) {
        return -1;
    }
    int failed = emit(p, value);
    Py_DECREF(value);
    return failed;
}

static int
emit_size(Probed *p, Py_ssize_t size)
{
    return emit_new(p, PyLong_FromSsize_t(size));
}

/* An exact dict's size, then its keys and values in order (None: no exact dict). */
static int
emit_items(Probed *p, PyObject *dict)
{
    if (dict == NULL || !PyDict_CheckExact(dict)) {
        return emit(p, Py_None);
    }
    if (emit_size(p, PyDict_GET_SIZE(dict)) < 0) {
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (p->same && PyDict_Next(dict, &pos, &key, &value)) {
        if (emit(p, key) < 0 || emit(p, value) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Pass over what emit_items read of a dict no event has touched since (it is
 * watched: held_watch): its size, then a key and a value per item. */
static int
skip_items(Probed *p)
{
    Py_ssize_t left = PyTuple_GET_SIZE(p->reading) - p->at;
    PyObject *size = left > 0 ? PyTuple_GET_ITEM(p->reading, p->at) : NULL;
    Py_ssize_t items = size != NULL && PyLong_CheckExact(size) ? PyLong_AsSsize_t(size) : -1;
    if (items == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (items < 0 || items > (left - 1) / 2) {
        p->same = 0; /* (not what emit_items reads: read as a change) */
        return 0;
    }
    p->at += 1 + 2 * items;
    return 0;
}

static int
emit_new_or_missing(Probed *p, PyObject *value) /* (a new reference, or NULL: missing) */
{
    int failed = emit(p, value);
    Py_XDECREF(value);
    return failed;
}

static int
emit_attribute(Probed *p, PyObject *target, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(target, name);
    if (value == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        return emit(p, NULL);
    }
    return emit_new(p, value);
}

/* The head of a dict's keys table (Include/internal/pycore_dict.h): `kind` is
 * DICT_KEYS_UNICODE (1) while every key is an exact str (inserting another kind
 * of key makes the table general: CPython's own lookups rely on it to compare
 * no key with code). Elsewhere, and for a table of another kind, the keys are
 * read. */
#define DICT_LAYOUT FIELDS_READ
#if DICT_LAYOUT
typedef struct {
    Py_ssize_t refcnt;
    uint8_t log2_size, log2_index_bytes, kind;
} DictKeysHead;
#endif

/* Whether an exact dict's keys table says its keys are all exact strs. */
static int
unicode_keys(PyObject *dict)
{
#if DICT_LAYOUT
    return ((DictKeysHead *)((PyDictObject *)dict)->ma_keys)->kind == 1;
#else
    return 0;
#endif
}

/* str_keys(dict): whether its keys table says at once that every key is an
 * exact str (False: it does not say, or no DICT_LAYOUT): what held_classes.py
 * checks at import. */
static PyObject *
str_keys(PyObject *module, PyObject *dict)
{
    return PyBool_FromLong(PyDict_CheckExact(dict) && unicode_keys(dict));
}

/* Whether `dict` is an exact dict whose keys are all exact strs: looking a str
 * up in it then compares strs only (a key of another class whose hash matched
 * would have its __eq__ run, which could change or free what the probes
 * read). Remembered for the rest of this reading (nothing runs code then). */
static int
str_keyed(Probed *p, PyObject *dict)
{
    if (dict == NULL || !PyDict_CheckExact(dict)) {
        return 0;
    }
    if (unicode_keys(dict)) {
        return 1;
    }
    for (int i = 0; i < p->n_str_keyed; i++) {
        if (p->str_keyed[i] == dict) {
            return 1;
        }
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            return 0;
        }
    }
    if (p->n_str_keyed < (int)(sizeof(p->str_keyed) / sizeof(p->str_keyed[0]))) {
        p->str_keyed[p->n_str_keyed++] = dict;
    }
    return 1;
}

/* dict[name], a new reference (NULL: missing, or an error); a dict that is not
 * str_keyed reads as missing. */
static PyObject *
lookup(Probed *p, PyObject *dict, PyObject *name)
{
    if (!PyUnicode_CheckExact(name) || !str_keyed(p, dict)) {
        return NULL;
    }
    return Py_XNewRef(PyDict_GetItemWithError(dict, name));
}

/* What `__import__` reads of a module already imported (import_get_module,
 * import_ensure_initialized), read as dict lookups only: the module (an exact
 * module, else missing) and its __spec__ (an item of its __dict__): two values.
 * What the spec holds is probed apart (held_classes.py: a ModuleSpec's dict,
 * whose `_initializing` must be missing or False). A new reference to the
 * module, or NULL (missing; or an error). */
static PyObject *
emit_module(Probed *p, PyObject *module_name)
{
    if (p->modules == NULL) {
        p->modules = Py_XNewRef(PyImport_GetModuleDict());
    }
    PyObject *module = lookup(p, p->modules, module_name);
    if (module != NULL && !PyModule_CheckExact(module)) {
        Py_CLEAR(module);
    }
    PyObject *spec = module == NULL ? NULL : lookup(p, PyModule_GetDict(module), p->str_spec);
    int failed = PyErr_Occurred() != NULL || emit(p, module) < 0 || emit(p, spec) < 0;
    Py_XDECREF(spec);
    if (failed) {
        Py_XDECREF(module);
        return NULL;
    }
    return module;
}

/* What find_class finds for (module, names): the module (emit_module), then
 * .a.b.c read as dict lookups only, so that no code of the user's runs (a
 * module's __getattr__, a metaclass's, a descriptor's __get__): the first name
 * from the module's __dict__ (not a dunder: a module's type defines some), each
 * next from the __dict__s of the MRO of a class whose metaclass is type (not a
 * dunder: type defines some), a value with no __get__ or a function (which
 * gives itself for a class). What a lookup cannot read so reads as missing:
 * held_classes.py then finds it differs from what the load found, and does
 * not reuse the part. Every object read is held while the next is looked up. */
static int
emit_global(Probed *p, PyObject *module_name, PyObject *names)
{
    PyObject *found = emit_module(p, module_name);
    if (found == NULL && PyErr_Occurred()) {
        return -1;
    }
    for (Py_ssize_t i = 0; found != NULL && i < PyTuple_GET_SIZE(names); i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i), *next = NULL;
        if (!PyUnicode_CheckExact(name) || is_dunder(name)) {
            next = NULL;
        }
        else if (i == 0) {
            next = lookup(p, PyModule_GetDict(found), name);
        }
        else if (Py_IS_TYPE(found, &PyType_Type)) {
            PyObject *mro = Py_XNewRef(((PyTypeObject *)found)->tp_mro);
            int readable = 1;
            for (Py_ssize_t k = 0; mro != NULL && next == NULL && readable && !PyErr_Occurred()
                                   && k < PyTuple_GET_SIZE(mro); k++) {
                PyTypeObject *klass = (PyTypeObject *)PyTuple_GET_ITEM(mro, k);
#if PY_VERSION_HEX >= 0x030C0000
                PyObject *dict = PyType_GetDict(klass);
#else
                PyObject *dict = Py_XNewRef(klass->tp_dict);
#endif
                readable = str_keyed(p, dict); /* (else getattr would compare keys there) */
                next = readable ? lookup(p, dict, name) : NULL;
                Py_XDECREF(dict);
            }
            Py_XDECREF(mro);
            if (next != NULL && Py_TYPE(next)->tp_descr_get != NULL && !PyFunction_Check(next)) {
                Py_CLEAR(next);
            }
        }
        Py_SETREF(found, next);
        if (found == NULL && PyErr_Occurred()) {
            return -1;
        }
    }
    if (PyTuple_GET_SIZE(names) == 0) {
        Py_XDECREF(found); /* (a module's own probe: emit_module emitted it) */
        return 0;
    }
    return emit_new_or_missing(p, found);
}

static int
emit_function(Probed *p, PyObject *target)
{
    if (!PyFunction_Check(target)) {
        return emit(p, Py_None);
    }
    PyFunctionObject *func = (PyFunctionObject *)target;
    PyObject *fields[] = {
        func->func_code, func->func_defaults, func->func_kwdefaults, func->func_doc, func->func_name,
        func->func_qualname, func->func_module, func->func_dict, func->func_annotations,
#if PY_VERSION_HEX >= 0x030C0000
        func->func_typeparams,
#endif
#if PY_VERSION_HEX >= 0x030E0000
        func->func_annotate,
#endif
    };
    Py_BUILD_ASSERT(sizeof(fields) / sizeof(fields[0]) == FUNCTION_FIELDS);
    for (Py_ssize_t i = 0; i < FUNCTION_FIELDS && p->same; i++) {
        if (emit(p, fields[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* A plain object (held_classes._plain): its class, its __dict__ (None if its
 * class gives it none), and each slot (member descriptors in `slots`). */
static int
emit_plain(Probed *p, PyObject *target, PyObject *slots)
{
    PyTypeObject *type = Py_TYPE(target);
    if (emit(p, (PyObject *)type) < 0) {
        return -1;
    }
    if (type->tp_dictoffset == 0) {
        if (emit(p, Py_None) < 0) {
            return -1;
        }
    }
    else if (emit_new(p, PyObject_GenericGetDict(target, NULL)) < 0) {
        return -1;
    }
    /* Each slot read from the object's memory, as its member descriptor's getter
     * reads it (an empty one raises there: an exception made is an allocation,
     * which may start a collection, whose finalizers run code of the user's). */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(slots) && p->same; i++) {
        PyObject *slot = PyTuple_GET_ITEM(slots, i);
        if (!Py_IS_TYPE(slot, &PyMemberDescr_Type)
            || !PyObject_TypeCheck(target, PyDescr_TYPE(slot))) {
            if (emit(p, Py_None) < 0) { /* (not a slot of this object's) */
                return -1;
            }
            continue;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)slot)->d_member;
        if (member->type != Py_T_OBJECT_EX) {
            PyErr_SetString(PyExc_TypeError, "held: a member that is not a __slots__ slot");
            return -1;
        }
        if (emit(p, *(PyObject **)((char *)target + member->offset)) < 0) {
            return -1;
        }
    }
    return 0;
}

/* An exact set's whole state, as its methods read it: its sizes, where pop()
 * starts (`finger`), and what each slot of its table holds (the iteration order
 * is the table's; an add may skip a slot a discard left). Read from PySetObject's
 * fields (Include/cpython/setobject.h; a dummy slot is one whose hash is -1).
 * None: no exact set, or a build that does not read them (SET_LAYOUT). */
#define SET_LAYOUT FIELDS_READ

static int
emit_set(Probed *p, PyObject *target)
{
    if (!SET_LAYOUT || !PySet_CheckExact(target)) {
        return emit(p, Py_None);
    }
#if SET_LAYOUT
    PySetObject *set = (PySetObject *)target;
    Py_ssize_t header[] = {set->used, set->fill, set->mask, set->finger};
    for (size_t i = 0; i < sizeof(header) / sizeof(header[0]) && p->same; i++) {
        if (emit_size(p, header[i]) < 0) {
            return -1;
        }
    }
    /* (Nothing below runs code: the table cannot change under the loop.) */
    for (Py_ssize_t i = 0; i <= set->mask && p->same; i++) {
        setentry *entry = &set->table[i];
        if (entry->key == NULL) {
            continue;
        }
        if (entry->hash == -1 ? emit_size(p, -1 - i) < 0
                              : emit_size(p, i) < 0 || emit(p, entry->key) < 0) {
            return -1;
        }
    }
#endif
    return 0;
}

/* A class's subclasses, as setting an attribute on it reads them (CPython
 * looks a slot's name up in each subclass's __dict__): the size, then each weak
 * reference, of a heap type's `tp_subclasses` (a dict of weak references).
 * None: not a heap type, or a build that does not read it (SUBCLASS_LAYOUT). */
#define SUBCLASS_LAYOUT FIELDS_READ

static int
emit_subclasses(Probed *p, PyObject *target)
{
    if (!SUBCLASS_LAYOUT || !PyType_Check(target)
        || !PyType_HasFeature((PyTypeObject *)target, Py_TPFLAGS_HEAPTYPE)) {
        return emit(p, Py_None);
    }
    PyObject *subclasses = ((PyTypeObject *)target)->tp_subclasses;
    if (subclasses == NULL) {
        return emit_size(p, 0);
    }
    if (!PyDict_CheckExact(subclasses)) {
        return emit(p, Py_None);
    }
    return emit_items(p, subclasses);
}

static int
read_probe(Probed *p, PyObject *probe)
{
    if (!PyTuple_CheckExact(probe) || PyTuple_GET_SIZE(probe) < 2) {
        PyErr_SetString(PyExc_TypeError, "held_snapshot: a probe is (kind, target[, argument])");
        return -1;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(probe, 0));
    PyObject *target = PyTuple_GET_ITEM(probe, 1);
    PyObject *argument = PyTuple_GET_SIZE(probe) > 2 ? PyTuple_GET_ITEM(probe, 2) : NULL;
    switch (kind) {
    case PROBE_ATTR:
        if (argument == NULL) {
            break;
        }
        return emit_attribute(p, target, argument);
    case PROBE_ITEMS:
        if (p->quiet && target != NULL && PyDict_CheckExact(target)) {
            return skip_items(p);
        }
        return emit_items(p, target);
    case PROBE_CLASS_ITEMS: {
        if (!PyType_Check(target)) {
            return emit(p, Py_None);
        }
        if (p->quiet) { /* (a class's dict is an exact dict, and it stays its dict) */
            return skip_items(p);
        }
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *dict = PyType_GetDict((PyTypeObject *)target);
#else
        PyObject *dict = Py_XNewRef(((PyTypeObject *)target)->tp_dict);
#endif
        int failed = emit_items(p, dict);
        Py_XDECREF(dict);
        return failed;
    }
    case PROBE_LIST:
        if (!PyList_CheckExact(target)) {
            return emit(p, Py_None);
        }
        if (emit_size(p, PyList_GET_SIZE(target)) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(target) && p->same; i++) {
            if (emit(p, PyList_GET_ITEM(target, i)) < 0) {
                return -1;
            }
        }
        return 0;
    case PROBE_SET:
        return emit_set(p, target);
    case PROBE_CELL:
        return emit(p, PyCell_Check(target) ? PyCell_GET(target) : NULL);
    case PROBE_GLOBAL:
        if (argument == NULL || !PyTuple_CheckExact(argument)) {
            break;
        }
        return emit_global(p, target, argument);
    case PROBE_MODULE:
    {
        PyObject *no_names = PyTuple_New(0);
        if (no_names == NULL) {
            return -1;
        }
        int failed = emit_global(p, target, no_names);
        Py_DECREF(no_names);
        return failed;
    }
    case PROBE_ANNOTATIONS: /* the field itself: reading __annotations__ may call __annotate__ (3.14+) */
        return emit(p, PyFunction_Check(target) ? ((PyFunctionObject *)target)->func_annotations : NULL);
    case PROBE_FUNCTION:
        return emit_function(p, target);
    case PROBE_PLAIN:
        if (argument == NULL || !PyTuple_CheckExact(argument)) {
            break;
        }
        return emit_plain(p, target, argument);
    case PROBE_ABSTRACT: /* what object.__new__ reads of a class besides its dicts */
        if (!PyType_Check(target)) {
            return emit(p, Py_None);
        }
        return emit(p, PyType_HasFeature((PyTypeObject *)target, Py_TPFLAGS_IS_ABSTRACT) ? Py_True
                                                                                     : Py_False);
    case PROBE_SUBCLASSES:
        return emit_subclasses(p, target);
    case PROBE_TUPLE: /* its items (making a code object of it interns strs in it, in
                       * place), then the hash 3.14+ keeps in it once computed (-1: none) */
        if (!PyTuple_CheckExact(target)) {
            return emit(p, Py_None);
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(target) && p->same; i++) {
            if (emit(p, PyTuple_GET_ITEM(target, i)) < 0) {
                return -1;
            }
        }
#if PY_VERSION_HEX >= 0x030E0000
        return emit_size(p, ((PyTupleObject *)target)->ob_hash);
#else
        return 0;
#endif
    case PROBE_KEY: { /* dict[key], read as emit_global reads a name */
        if (argument == NULL) {
            break;
        }
        PyObject *found = lookup(p, target, argument);
        return PyErr_Occurred() != NULL ? -1 : emit_new_or_missing(p, found);
    }
    case PROBE_MODULES: { /* the dict sys.modules names (target: sys's dict), and the interpreter's */
        PyObject *named = lookup(p, target, p->str_modules); /* (NULL on an error) */
        if (PyErr_Occurred() != NULL || emit_new_or_missing(p, named) < 0) {
            return -1;
        }
        return emit(p, PyImport_GetModuleDict());
    }
    }
    if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "held_snapshot: a probe of unknown kind");
    }
    return -1;
}

static int
read_probes(Probed *p, PyObject *probes)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(probes) && p->same; i++) {
        if (read_probe(p, PyTuple_GET_ITEM(probes, i)) < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
held_snapshot(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "held_snapshot(probes: tuple, missing)");
        return NULL;
    }
    SpeedupsState *st = module_state(module);
    Probed p = {PyList_New(0), NULL, args[1], 0, 1, NULL, {NULL}, 0, st->str_spec, st->str_modules, 0};
    if (p.out == NULL) {
        return NULL;
    }
    PyObject *snapshot = read_probes(&p, args[0]) < 0 ? NULL : PyList_AsTuple(p.out);
    Py_DECREF(p.out);
    Py_XDECREF(p.modules);
    return snapshot;
}

/* Whether `probes` read `reading`, all of it (-1: an error), passing over
 * watched dicts' items if `quiet` (held_unchanged_since). */
static int
probes_read(SpeedupsState *st, PyObject *probes, PyObject *reading, PyObject *missing, int quiet)
{
    Probed p = {NULL, reading, missing, 0, 1, NULL, {NULL}, 0, st->str_spec, st->str_modules, quiet};
    int failed = read_probes(&p, probes);
    Py_XDECREF(p.modules);
    return failed < 0 ? -1 : p.same && p.at == PyTuple_GET_SIZE(reading);
}

static PyObject *
held_unchanged(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "held_unchanged(probes: tuple, reading: tuple, missing)");
        return NULL;
    }
    int same = probes_read(module_state(module), args[0], args[1], args[2], 0);
    return same < 0 ? NULL : PyBool_FromLong(same);
}

#if PY_VERSION_HEX >= 0x030C0000
/* The events of the dicts held_watch watches, counted (only ever up, under the
 * GIL). A watcher's callback runs before each change of a watched dict: every
 * change made through the dict API, by any code (PEP 509's successor). Those
 * of the module state's `watch_sentinel`, which both our watchers watch, are
 * counted apart, by each: a cache that would trust a count first changes the
 * sentinel, and trusts it only if that change was counted (a library that
 * cleared or took our watcher's id stops the counting). A watcher's callback
 * reaches no module state: these and the sentinels' addresses (one per module
 * object, at most MAX_SENTINELS: a module object past them has no watchers)
 * are the statics that change. */
static uint64_t held_events, held_sentinel_events;
#define MAX_SENTINELS 8
static PyObject *watch_sentinels[MAX_SENTINELS]; /* (each module state holds its own) */

static int
is_sentinel(PyObject *dict)
{
    for (int i = 0; i < MAX_SENTINELS; i++) {
        if (watch_sentinels[i] == dict) {
            return 1;
        }
    }
    return 0;
}

/* A watcher's callback: the event of `dict` counted in `*sentinel` or `*events`. */
static int
count_event(PyObject *dict, uint64_t *events, uint64_t *sentinel)
{
    ++*(is_sentinel(dict) ? sentinel : events);
    return 0;
}

static int
count_held_event(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *new_value)
{
    return count_event(dict, &held_events, &held_sentinel_events);
}

/* Whether the watcher that counts the sentinel's events in `*count` still
 * counts: a change of the sentinel moved it (an error reads as no). */
static int
still_counting(SpeedupsState *st, const uint64_t *count)
{
    if (st->watch_sentinel == NULL) {
        return 0;
    }
    PyObject *was = PyDict_GetItemWithError(st->watch_sentinel, Py_None); /* (borrowed) */
    uint64_t before = *count;
    if ((was == NULL && PyErr_Occurred())
        || PyDict_SetItem(st->watch_sentinel, Py_None, was == Py_True ? Py_False : Py_True) < 0) {
        PyErr_Clear();
        return 0;
    }
    return *count == before + 1;
}
#endif

/* held_watch(probes): watch each dict the probes read whole (PROBE_ITEMS of an
 * exact dict, PROBE_CLASS_ITEMS's class dict); whether they are watched (False
 * without a watcher: 3.11, or none left). */
static PyObject *
held_watch(PyObject *module, PyObject *probes)
{
    if (!PyTuple_CheckExact(probes)) {
        PyErr_SetString(PyExc_TypeError, "held_watch(probes: tuple)");
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030C0000
    SpeedupsState *st = module_state(module);
    if (st->held_watcher < 0) {
        Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(probes); i++) {
        PyObject *probe = PyTuple_GET_ITEM(probes, i);
        if (!PyTuple_CheckExact(probe) || PyTuple_GET_SIZE(probe) < 2) {
            continue;
        }
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(probe, 0));
        if (kind == -1 && PyErr_Occurred()) {
            return NULL;
        }
        PyObject *target = PyTuple_GET_ITEM(probe, 1), *dict = NULL;
        if (kind == PROBE_ITEMS && PyDict_CheckExact(target)) {
            dict = Py_NewRef(target);
        }
        else if (kind == PROBE_CLASS_ITEMS && PyType_Check(target)) {
            dict = PyType_GetDict((PyTypeObject *)target);
            if (dict == NULL) {
                return NULL;
            }
        }
        if (dict != NULL) {
            int failed = PyDict_Watch(st->held_watcher, dict);
            Py_DECREF(dict);
            if (failed < 0) {
                return NULL;
            }
        }
    }
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* dict_watchers(): the ids of our two dict watchers, (held, modules); -1 where
 * there is none (3.11, or none could be had). */
static PyObject *
dict_watchers(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    SpeedupsState *st = module_state(module);
    return Py_BuildValue("(ii)", st->held_watcher, st->modules_watcher);
}

/* held_unchanged_since(probes, reading, missing, since): held_unchanged, which
 * passes over the items of the dicts the probes read whole if no event of the
 * watched dicts came since `since` (a count this function returned for these
 * very probes, once held_watch(probes) watched them; None: read them all).
 * False if the probes read otherwise; else the count to pass next time (True
 * without a watcher). The count is read first: a change in the reading (code
 * that PROBE_ATTR runs) makes the next call read all again. */
static PyObject *
held_unchanged_since(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "held_unchanged_since(probes: tuple, reading: tuple, missing, since)");
        return NULL;
    }
    SpeedupsState *st = module_state(module);
#if PY_VERSION_HEX >= 0x030C0000
    int watched = st->held_watcher >= 0;
    uint64_t now = held_events;
#else
    int watched = 0;
    uint64_t now = 0;
#endif
    int quiet = 0;
    if (watched && PyLong_CheckExact(args[3])) {
        unsigned long long since = PyLong_AsUnsignedLongLong(args[3]);
        if (since == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear(); /* (not a count of ours: read all) */
        }
        else {
            quiet = since == now;
        }
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (quiet && !still_counting(st, &held_sentinel_events)) {
        quiet = watched = 0; /* (no count is worth anything then: read all, and give none) */
    }
#endif
    int same = probes_read(st, args[0], args[1], args[2], quiet);
    if (same <= 0) {
        return same < 0 ? NULL : Py_NewRef(Py_False);
    }
    if (!watched) {
        Py_RETURN_TRUE;
    }
    return PyLong_FromUnsignedLongLong(now);
}

/* memo_gets(data, mask): whether the pickle `data` gets a memo entry whose
 * byte in `mask` is not 0, read as the unpickler reads it up to its STOP; True
 * for what it cannot read (a GET by text, an unknown opcode): a reused classes'
 * part is then not reused for it (held_classes.py). */
static PyObject *
memo_gets(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "memo_gets(data, mask: bytes)");
        return NULL;
    }
    const unsigned char *mask = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t masked = PyBytes_GET_SIZE(args[1]);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    const unsigned char *p = view.buf, *end = p + view.len;
    while (p != NULL && p < end && *p != '.') {
        Py_ssize_t index = -1;
        if (*p == 'h' && end - p >= 2) {
            index = p[1];
        }
        else if (*p == 'j' && end - p >= 5) {
            index = (Py_ssize_t)read_le(p + 1, 4);
        }
        else if (*p == 'g') {
            break; /* (a memo key as text: not read here) */
        }
        if (index >= 0 && index < masked && mask[index]) {
            break;
        }
        p = skip_opcode(p, end); /* (a FRAME: its content is opcodes, read on) */
    }
    int gets = !(p != NULL && p < end && *p == '.');
    PyBuffer_Release(&view);
    return PyBool_FromLong(gets);
}

#if PY_VERSION_HEX >= 0x030C0000
/* The events of the dicts watched as sys.modules, counted (only ever up, under
 * the GIL), and those of the sentinel apart (see held_events). */
static uint64_t modules_events, modules_sentinel_events;

static int
count_modules_event(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *new_value)
{
    return count_event(dict, &modules_events, &modules_sentinel_events);
}
#endif

#if PY_VERSION_HEX >= 0x030C0000
static int
count_nothing(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *new_value)
{
    return 0;
}

/* Our two dict watchers take the highest ids free (held_watcher the highest,
 * then modules_watcher): CPython calls a dict's watchers in the order of their
 * ids, before the change, so every other watcher runs before ours (one added
 * later gets a lower id), and no code runs between our count and the change
 * (code another watcher ran there, a Python callback or an unraisable hook,
 * could let a check read the dict as it was after our count moved, and keep
 * that count). A watcher that cannot be had so is not had: -1 (checks read
 * all; same_modules walks). */
static void
add_watchers_last(SpeedupsState *st)
{
    int taken[64], n = 0, top = -1, second = -1, id;
    st->modules_watcher = st->held_watcher = -1;
    while (n < 64 && (id = PyDict_AddWatcher(count_nothing)) >= 0) {
        taken[n++] = id;
    }
    PyErr_Clear(); /* (none left) */
    for (int i = 0; i < n; i++) {
        if (taken[i] > top) {
            second = top;
            top = taken[i];
        }
        else if (taken[i] > second) {
            second = taken[i];
        }
    }
    /* (An id freed is the lowest free one: the next watcher added gets it.) */
    if (second >= 0 && PyDict_ClearWatcher(second) == 0) {
        id = PyDict_AddWatcher(count_modules_event);
        if (id == second) {
            st->modules_watcher = id;
        }
        else if (id >= 0) {
            (void)PyDict_ClearWatcher(id);
        }
    }
    if (top >= 0 && PyDict_ClearWatcher(top) == 0) {
        id = PyDict_AddWatcher(count_held_event);
        if (id == top) {
            st->held_watcher = id;
        }
        else if (id >= 0) {
            (void)PyDict_ClearWatcher(id);
        }
    }
    for (int i = 0; i < n; i++) {
        if (taken[i] != top && taken[i] != second) {
            (void)PyDict_ClearWatcher(taken[i]);
        }
    }
    PyErr_Clear();
}
#endif

/* Whether `modules` (sys.modules, an exact dict) is the dict of st->modules_items
 * and has not changed since that tuple was made. */
static int
modules_unchanged(SpeedupsState *st, PyObject *modules)
{
    if (modules != st->modules_dict || st->modules_items == NULL) {
        return 0;
    }
#if PY_VERSION_HEX >= 0x030C0000
    return st->modules_watcher >= 0 && modules_events == st->modules_stamp
           && still_counting(st, &modules_sentinel_events);
#else
    return ((PyDictObject *)modules)->ma_version_tag == st->modules_stamp;
#endif
}

/* modules_items(): sys.modules's keys and values, flat, in order (what
 * cloudpickle's submodule search reads), as one tuple for as long as the dict
 * is the same and unchanged; None if sys.modules is not an exact dict (the
 * Python version copies it then). */
static PyObject *
modules_items(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    SpeedupsState *st = module_state(module);
    PyObject *modules = sys_modules(st);
    if (modules == NULL) {
        Py_RETURN_NONE;
    }
    if (modules_unchanged(st, modules)) {
        return Py_NewRef(st->modules_items);
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (modules != st->modules_dict && st->modules_watcher >= 0) {
        if ((st->modules_dict != NULL && PyDict_Unwatch(st->modules_watcher, st->modules_dict) < 0)
            || PyDict_Watch(st->modules_watcher, modules) < 0) {
            return NULL;
        }
    }
    uint64_t stamp = modules_events;
#else
    uint64_t stamp = ((PyDictObject *)modules)->ma_version_tag;
#endif
    PyObject *items = PyTuple_New(2 * PyDict_GET_SIZE(modules));
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0, at = 0;
    PyObject *key, *value;
    while (PyDict_Next(modules, &pos, &key, &value)) { /* (no Python code runs) */
        PyTuple_SET_ITEM(items, at, Py_NewRef(key));
        PyTuple_SET_ITEM(items, at + 1, Py_NewRef(value));
        at += 2;
    }
    Py_XSETREF(st->modules_dict, Py_NewRef(modules));
    Py_XSETREF(st->modules_items, Py_NewRef(items));
    st->modules_stamp = stamp;
    return items;
}

/* same_modules(items): whether sys.modules holds the very keys and values of
 * `items` (a flat tuple: key, value, key, value...), in the same order. The
 * submodules cloudpickle lists for a function depend on them. */
static PyObject *
same_modules(PyObject *module, PyObject *items)
{
    SpeedupsState *st = module_state(module);
    PyObject *modules = sys_modules(st); /* borrowed: what cloudpickle reads */
    if (modules != NULL && items == st->modules_items && modules_unchanged(st, modules)) {
        Py_RETURN_TRUE;
    }
    if (modules == NULL || !PyTuple_CheckExact(items)
        || PyTuple_GET_SIZE(items) != 2 * PyDict_GET_SIZE(modules)) {
        Py_RETURN_FALSE;
    }
    Py_ssize_t pos = 0, at = 0;
    PyObject *key, *value;
    while (PyDict_Next(modules, &pos, &key, &value)) {
        if (at + 2 > PyTuple_GET_SIZE(items) || PyTuple_GET_ITEM(items, at) != key
            || PyTuple_GET_ITEM(items, at + 1) != value) {
            Py_RETURN_FALSE;
        }
        at += 2;
    }
    return PyBool_FromLong(at == PyTuple_GET_SIZE(items));
}

/* The layouts that reducers.py builds and this module reads by position; both
 * are exported, and reducers.py hands its tables to set_remembered only if
 * they are its own (tests/test_by_value_cache.py checks them too). */
static const char *SNAPSHOT_FIELDS[SNAPSHOT_FIXED] = {
    "code", "defaults", "kwdefaults", "name", "qualname", "module", "doc", "annotations", "closure",
};
static const char *ENTRY_FIELDS[ENTRY_SIZE] = {
    "ref", "snapshot", "names", "modules", "growable", "generation", "parts", "block", "recheck",
};
static const char *PARTS_FIELDS[PARTS_SIZE] = {"make", "code", "closure", "state", "setstate"};

static int
add_layout(PyObject *module, const char *name, const char **fields, Py_ssize_t n)
{
    PyObject *layout = PyTuple_New(n);
    for (Py_ssize_t i = 0; layout != NULL && i < n; i++) {
        PyObject *field = PyUnicode_FromString(fields[i]);
        if (field == NULL) {
            Py_CLEAR(layout);
            break;
        }
        PyTuple_SET_ITEM(layout, i, field);
    }
    if (layout == NULL) {
        return -1;
    }
    int failed = PyModule_AddObjectRef(module, name, layout);
    Py_DECREF(layout);
    return failed;
}

static PyMethodDef speedups_methods[] = {
    {"function_snapshot", (PyCFunction)(void (*)(void))function_snapshot, METH_FASTCALL,
     PyDoc_STR("function_snapshot(func, names, missing): what its by-value reduction reads.")},
    {"set_session_reductions", (PyCFunction)(void (*)(void))set_session_reductions, METH_FASTCALL,
     PyDoc_STR("set_session_reductions(block_reduction, subimport): what a dump on a connection "
               "answers with.")},
    {"set_function_layouts", (PyCFunction)(void (*)(void))set_function_layouts, METH_FASTCALL,
     PyDoc_STR("set_function_layouts(builtins, layouts, slow): what make_function needs.")},
    {"set_function_refs", (PyCFunction)(void (*)(void))set_function_refs, METH_FASTCALL,
     PyDoc_STR("set_function_refs(receiver_var, receiver_type, slow, held_parts, sent_parts): "
               "what function_ref needs.")},
    {"function_ref", (PyCFunction)(void (*)(void))function_ref, METH_FASTCALL,
     PyDoc_STR("function_ref(digest, *parts): the function (or base globals) of the function "
               "block the receiving connection holds (graphpickle.core.blocks).")},
    {"subimport", subimport, METH_O,
     PyDoc_STR("subimport(name): __import__(name), then sys.modules[name] (graphpickle.core.blocks).")},
    {"make_function", (PyCFunction)(void (*)(void))make_function, METH_FASTCALL,
     PyDoc_STR("make_function(code, base_globals, closure, layout, attributes, *slot_values): "
               "the function cloudpickle's receiver makes (graphpickle.core.blocks).")},
    {"same_objects", (PyCFunction)(void (*)(void))same_objects, METH_FASTCALL,
     PyDoc_STR("same_objects(a, b): two flat tuples of the same objects, position by position.")},
    {"memo_gets", (PyCFunction)(void (*)(void))memo_gets, METH_FASTCALL,
     PyDoc_STR("memo_gets(data, mask): the pickle gets a memo entry the mask marks.")},
    {"held_unchanged", (PyCFunction)(void (*)(void))held_unchanged, METH_FASTCALL,
     PyDoc_STR("held_unchanged(probes, reading, missing): held_snapshot(probes, missing) is reading.")},
    {"str_keys", str_keys, METH_O, NULL},
    {"held_unchanged_since", (PyCFunction)(void (*)(void))held_unchanged_since, METH_FASTCALL,
     PyDoc_STR("held_unchanged_since(probes, reading, missing, since): held_unchanged, passing over "
               "watched dicts no event touched since `since`; False, or the count for next time.")},
    {"dict_watchers", (PyCFunction)dict_watchers, METH_NOARGS,
     PyDoc_STR("dict_watchers(): the ids of the module's dict watchers, (held, modules); -1: none.")},
    {"held_watch", (PyCFunction)held_watch, METH_O,
     PyDoc_STR("held_watch(probes): watch the dicts the probes read whole; whether they are.")},
    {"held_snapshot", (PyCFunction)(void (*)(void))held_snapshot, METH_FASTCALL,
     PyDoc_STR("held_snapshot(probes, missing): what each probe of a held classes' part reads now, flat.")},
    {"modules_items", modules_items, METH_NOARGS,
     PyDoc_STR("modules_items(): sys.modules's keys and values, flat; the same tuple while it does not change.")},
    {"same_modules", same_modules, METH_O,
     PyDoc_STR("same_modules(items): sys.modules holds these keys and values, in this order.")},
    {"remember_by_reference", remember_by_reference, METH_O,
     PyDoc_STR("remember_by_reference(obj): the policy found this function or class importable.")},
    {"set_by_reference_policy", (PyCFunction)(void (*)(void))set_by_reference_policy, METH_FASTCALL,
     PyDoc_STR("set_by_reference_policy(registries, function_handler, class_handler, "
               "module_handler, subimport): what a remembered answer stands for; the registries "
               "(a list of sets, read live) are read at every hit.")},
    {"set_remembered", (PyCFunction)(void (*)(void))set_remembered, METH_FASTCALL,
     PyDoc_STR("set_remembered(code_handler, builtin_types, codes, functions, captures_globals, "
               "missing): the tables the hook answers from without calling a handler.")},
    {"bytearray8_overruns", bytearray8_overruns_py, METH_O,
     PyDoc_STR("bytearray8_overruns(data): the pickle has a BYTEARRAY8 longer than the data.")},
    {NULL, NULL, 0, NULL},
};

/* The state of a new module: its names, tables and types. */
static int
init_state(PyObject *module, SpeedupsState *st)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&st->str_module, "__module__"}, {&st->str_by_value, "by_value"},
        {&st->str_memo, "memo"}, {&st->str_join, "join"}, {&st->str_qualname, "__qualname__"},
        {&st->str_protocol, "protocol"}, {&st->str_buffer_callback, "buffer_callback"},
        {&st->str_deterministic, "deterministic"}, {&st->str_buffers, "buffers"},
        {&st->str_fix_imports, "fix_imports"}, {&st->str_encoding, "encoding"},
        {&st->str_errors, "errors"}, {&st->str_speedups, "_speedups"}, {&st->str_buffer, "buffer"},
        {&st->str_generation, "_generation"}, {&st->str_globals_ref, "globals_ref"},
        {&st->str_package, "__package__"}, {&st->str_name, "__name__"}, {&st->str_path, "__path__"},
        {&st->str_file, "__file__"}, {&st->str_locals, "<locals>"}, {&st->str_lambda, "<lambda>"},
        {&st->str_modules, "modules"}, {&st->str_blocks, "blocks"},
        {&st->str_builtins, "__builtins__"}, {&st->str_dict, "__dict__"},
        {&st->str_update, "update"}, {&st->str_closure, "__closure__"},
        {&st->str_cell_contents, "cell_contents"}, {&st->str_held, "held"},
        {&st->str_import, "__import__"}, {&st->str_sent_as, "sent_as"},
        {&st->str_sender, "sender"}, {&st->str_carried, "carried"},
        {&st->str_spec, "__spec__"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) {
            return -1;
        }
    }
    struct {
        PyTypeObject **slot;
        PyType_Spec *spec;
    } types[] = {
        {&st->dispatch_type, &dispatch_spec}, {&st->sink_type, &sink_spec},
        {&st->dumper_type, &dumper_spec}, {&st->loader_type, &loader_spec},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        PyObject *type = PyType_FromModuleAndSpec(module, types[i].spec, NULL);
        if (type == NULL || PyModule_AddType(module, (PyTypeObject *)type) < 0) {
            Py_XDECREF(type);
            return -1;
        }
        *types[i].slot = (PyTypeObject *)type;
    }
    st->empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    st->empty_dict = PyDict_New();
    st->by_reference = PyDict_New();
    st->parent_names = PyDict_New();
    /* policy._MAIN_MODULES: no other process imports the sender's main module. */
    st->main_modules = Py_BuildValue("(ss)", "__main__", "__mp_main__");
    PyObject *sys = PyImport_ImportModule("sys");
    st->sys_dict = sys == NULL ? NULL : Py_NewRef(PyModule_GetDict(sys));
    Py_XDECREF(sys);
    if (st->sys_dict == NULL) {
        return -1;
    }
    PyObject *builtins = PyImport_ImportModule("builtins");
    st->builtins_dict = builtins == NULL ? NULL : Py_NewRef(PyModule_GetDict(builtins));
    Py_XDECREF(builtins);
    if (st->builtins_dict == NULL) {
        return -1;
    }
    st->by_value_registries = PyList_New(0); /* until set_by_reference_policy() */
#if PY_VERSION_HEX >= 0x030C0000
    /* (An interpreter has 8 dict watchers: without one, same_modules walks.) */
    st->watch_sentinel = PyDict_New();
    if (st->watch_sentinel == NULL) {
        return -1;
    }
    int slot = 0;
    while (slot < MAX_SENTINELS && watch_sentinels[slot] != NULL) {
        slot++;
    }
    if (slot < MAX_SENTINELS) { /* (else no watchers: checks read all, same_modules walks) */
        watch_sentinels[slot] = st->watch_sentinel;
        add_watchers_last(st);
    }
    else {
        st->modules_watcher = st->held_watcher = -1;
    }
    if ((st->held_watcher >= 0 && PyDict_Watch(st->held_watcher, st->watch_sentinel) < 0)
        || (st->modules_watcher >= 0 && PyDict_Watch(st->modules_watcher, st->watch_sentinel) < 0)) {
        return -1;
    }
#else
    st->modules_watcher = -1;
    st->held_watcher = -1;
#endif
    if (st->empty_bytes == NULL || st->empty_dict == NULL || st->by_reference == NULL
        || st->parent_names == NULL || st->by_value_registries == NULL || st->main_modules == NULL
        || st->sys_dict == NULL || st->builtins_dict == NULL) {
        return -1;
    }
    return 0;
}

static int
init_tables(void)
{
    init_opcode_args();
    return 0;
}

static int tables_ready; /* the opcode table: made once, then constant */

static int
speedups_exec(PyObject *module)
{
    if (once(&tables_ready, init_tables) < 0 || init_state(module, module_state(module)) < 0
        || add_version(module, 27) < 0 /* VERSION: native.py */
        || PyModule_AddIntConstant(module, "SET_LAYOUT", SET_LAYOUT) < 0
        || PyModule_AddIntConstant(module, "DICT_LAYOUT", DICT_LAYOUT) < 0
        || PyModule_AddIntConstant(module, "SUBCLASS_LAYOUT", SUBCLASS_LAYOUT) < 0
        || add_layout(module, "SNAPSHOT_FIELDS", SNAPSHOT_FIELDS, SNAPSHOT_FIXED) < 0
        || add_layout(module, "FUNCTION_FIELDS", function_fields, FUNCTION_FIELDS) < 0
        || add_layout(module, "ENTRY_FIELDS", ENTRY_FIELDS, ENTRY_SIZE) < 0
        || add_layout(module, "PARTS_FIELDS", PARTS_FIELDS, PARTS_SIZE) < 0) {
        return -1;
    }
    return 0;
}

static int
speedups_traverse(PyObject *module, visitproc visit, void *arg)
{
    SpeedupsState *st = module_state(module);
#define VISIT_FIELD(field) Py_VISIT(st->field);
    FOR_EACH_STATE_FIELD(VISIT_FIELD)
#undef VISIT_FIELD
    return 0;
}

static int
speedups_clear(PyObject *module)
{
    SpeedupsState *st = module_state(module);
#if PY_VERSION_HEX >= 0x030C0000
    /* (A library may have cleared our ids: nothing to clear then.) */
    if (st->held_watcher >= 0 && PyDict_ClearWatcher(st->held_watcher) < 0) {
        PyErr_Clear();
    }
    st->held_watcher = -1;
    if (st->modules_watcher >= 0 && PyDict_ClearWatcher(st->modules_watcher) < 0) {
        PyErr_Clear();
    }
    st->modules_watcher = -1;
    for (int i = 0; i < MAX_SENTINELS; i++) {
        if (watch_sentinels[i] != NULL && watch_sentinels[i] == st->watch_sentinel) {
            watch_sentinels[i] = NULL;
        }
    }
#endif
#define CLEAR_FIELD(field) Py_CLEAR(st->field);
    FOR_EACH_STATE_FIELD(CLEAR_FIELD)
#undef CLEAR_FIELD
    return 0;
}

static void
speedups_free(void *module)
{
    speedups_clear((PyObject *)module);
}

GRAPHPICKLE_MODULE_SLOTS(speedups_slots, speedups_exec, GRAPHPICKLE_GIL_USED);

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "graphpickle.core._speedups",
    .m_doc = "The pickler's per-object hook, dumps and loads for small messages, in C.",
    .m_size = sizeof(SpeedupsState),
    .m_methods = speedups_methods,
    .m_slots = speedups_slots,
    .m_traverse = speedups_traverse,
    .m_clear = speedups_clear,
    .m_free = speedups_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}

