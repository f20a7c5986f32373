"""Globals known to run code, touch the system or load more code when a pickle
calls them: the table ``inspect`` flags as "can run code on load".

The allow-list decides first (``DATA_ONLY`` is data); this table names what
is known to be dangerous among the rest, so that a verdict can say *why*. It
follows the public record of pickle attacks: the gadgets picklescan, fickling
and modelscan check for, and the bypasses reported against them (less known
code runners such as ``cProfile.run`` or ``pkgutil.resolve_name``, traversal
through module attributes, nested loaders). A name not in the table is not
proven safe: it is reported as an import outside the data-only list.

Keys are exact ``module.qualname`` names, or ``module.*`` for every name of a
module and its submodules.
"""

from __future__ import annotations

import sys
import types

__all__ = ["danger_of"]

_SHELL = "runs a shell command"
_PROCESS = "starts or replaces a process"
_CODE = "runs Python code"
_IMPORT = "imports any module"
_FILES = "reads, writes or deletes files"
_NETWORK = "opens network connections"
_NATIVE = "calls native code"
_LOADS = "loads a nested payload (a pickle or code)"
_REACH = "reaches any attribute or calls its arguments"
_INTERPRETER = "changes the interpreter"

GADGETS: dict[str, str] = {
    # processes and shells
    "os.system": _SHELL,
    "posix.system": _SHELL,
    "nt.system": _SHELL,
    "os.popen": _SHELL,
    "os.*": "operating-system calls (commands, processes, files)",
    "posix.*": "operating-system calls (commands, processes, files)",
    "nt.*": "operating-system calls (commands, processes, files)",
    "subprocess.*": _PROCESS,
    "_posixsubprocess.*": _PROCESS,
    "pty.*": _PROCESS,
    "asyncio.*": _PROCESS,
    "multiprocessing.*": _PROCESS,
    "concurrent.*": _PROCESS,
    "commands.*": _SHELL,
    "popen2.*": _SHELL,
    "platform.popen": _SHELL,
    "webbrowser.*": _PROCESS,
    "uuid._get_command_stdout": _SHELL,
    # code runners
    "builtins.eval": _CODE,
    "builtins.exec": _CODE,
    "builtins.compile": _CODE,
    "builtins.execfile": _CODE,
    "builtins.__import__": _IMPORT,
    "builtins.breakpoint": "starts a debugger",
    "builtins.input": "reads the terminal",
    "builtins.help": "starts the help pager",
    "builtins.exit": "exits the interpreter",
    "builtins.quit": "exits the interpreter",
    "builtins.open": _FILES,
    "builtins.setattr": _INTERPRETER,
    "builtins.delattr": _INTERPRETER,
    "builtins.globals": _INTERPRETER,
    "builtins.locals": _INTERPRETER,
    "builtins.vars": _INTERPRETER,
    "builtins.super": _REACH,
    "builtins.object.__getattribute__": _REACH,
    "builtins.object.__reduce_ex__": _REACH,
    "builtins.map": "applies a callable",
    "builtins.filter": "applies a callable",
    "builtins.memoryview": "reads raw memory",
    "runpy.*": _CODE,
    "code.*": _CODE,
    "codeop.*": _CODE,
    "cProfile.*": _CODE,
    "profile.*": _CODE,
    "pstats.*": _FILES,
    "timeit.*": _CODE,
    "trace.*": _CODE,
    "pdb.*": _CODE,
    "bdb.*": _CODE,
    "doctest.*": _CODE,
    "pydoc.*": _CODE,
    "idlelib.*": _CODE,
    "unittest.*": _CODE,
    "test.*": _CODE,
    "types.*": "builds code, functions or modules",
    "inspect.*": _REACH,
    "ast.literal_eval": "parses code",
    "numpy.testing._private.utils.runstring": _CODE,
    "numpy.f2py.*": _CODE,
    "numpy.distutils.*": _CODE,
    "distutils.*": _CODE,
    "setuptools.*": _CODE,
    "pip.*": _CODE,
    "ensurepip.*": _CODE,
    "venv.*": _CODE,
    "site.*": _INTERPRETER,
    "sysconfig.*": _INTERPRETER,
    "sys.*": _INTERPRETER,
    "gc.*": _INTERPRETER,
    "atexit.*": _INTERPRETER,
    "signal.*": _INTERPRETER,
    "threading.*": _PROCESS,
    "_thread.*": _PROCESS,
    "copyreg.add_extension": _INTERPRETER,
    "copyreg.remove_extension": _INTERPRETER,
    "copyreg.clear_extension_cache": _INTERPRETER,
    "copyreg.pickle": _INTERPRETER,
    "copyreg.constructor": _INTERPRETER,
    "functools.partial": _REACH,
    "functools.reduce": _REACH,
    "functools.partialmethod": _REACH,
    "functools.singledispatch": _REACH,
    "operator.attrgetter": _REACH,
    "operator.methodcaller": _REACH,
    "operator.call": _REACH,
    "operator.getitem": _REACH,
    "operator.setitem": _INTERPRETER,
    "operator.delitem": _INTERPRETER,
    "_operator.*": _REACH,
    "itertools.*": "applies callables lazily",
    "contextlib.*": _REACH,
    # imports
    "importlib.*": _IMPORT,
    "imp.*": _IMPORT,
    "pkgutil.*": _IMPORT,
    "zipimport.*": _IMPORT,
    "_frozen_importlib.*": _IMPORT,
    "_frozen_importlib_external.*": _IMPORT,
    "_imp.*": _IMPORT,
    # files
    "io.*": _FILES,
    "_io.*": _FILES,
    "codecs.open": _FILES,
    "codecs.lookup": _IMPORT,
    "_codecs.lookup": _IMPORT,
    "shutil.*": _FILES,
    "tempfile.*": _FILES,
    "glob.*": _FILES,
    "pathlib.*": _FILES,
    "fileinput.*": _FILES,
    "linecache.*": _FILES,
    "zipfile.*": _FILES,
    "tarfile.*": _FILES,
    "shelve.*": _LOADS,
    "dbm.*": _FILES,
    "sqlite3.*": _FILES,
    "logging.*": _FILES,
    # network
    "socket.*": _NETWORK,
    "_socket.*": _NETWORK,
    "ssl.*": _NETWORK,
    "http.*": _NETWORK,
    "urllib.*": _NETWORK,
    "urllib2.*": _NETWORK,
    "httplib.*": _NETWORK,
    "ftplib.*": _NETWORK,
    "smtplib.*": _NETWORK,
    "poplib.*": _NETWORK,
    "imaplib.*": _NETWORK,
    "telnetlib.*": _NETWORK,
    "nntplib.*": _NETWORK,
    "xmlrpc.*": _NETWORK,
    "requests.*": _NETWORK,
    "aiohttp.*": _NETWORK,
    "socketserver.*": _NETWORK,
    # native code
    "ctypes.*": _NATIVE,
    "_ctypes.*": _NATIVE,
    "cffi.*": _NATIVE,
    "mmap.*": _NATIVE,
    # nested loaders
    "pickle.*": _LOADS,
    "_pickle.*": _LOADS,
    "cPickle.*": _LOADS,
    "pickletools.*": _LOADS,
    "marshal.*": _LOADS,
    "dill.*": _LOADS,
    "cloudpickle.load": _LOADS,
    "cloudpickle.loads": _LOADS,
    "joblib.*": _LOADS,
    "torch.*": _LOADS,
    "numpy.load": _LOADS,
    "numpy.loads": _LOADS,
    "numpy.lib.npyio.*": _LOADS,
    "numpy.lib._npyio_impl.*": _LOADS,
    "numpy.lib.format.*": _LOADS,
    "numpy.fromfile": _FILES,
    "numpy.save": _FILES,
    "numpy.savetxt": _FILES,
    "numpy.loadtxt": _FILES,
    "numpy.genfromtxt": _FILES,
    "numpy.memmap": _FILES,
    "pandas.read_pickle": _LOADS,
    "pandas.io.*": "reads or writes files",
    "pandas.eval": _CODE,
    "pandas.core.computation.*": _CODE,
    "pandas.read_csv": _FILES,
    "pandas.read_sql": _NETWORK,
    "yaml.*": _LOADS,
    "jsonpickle.*": _LOADS,
}

# What a dotted or dunder name may reach that the table cannot name: a module's
# machinery, or an object's class, globals and dictionaries.
_INTERNALS = "reaches a module's or object's internals (a dunder attribute)"
_HARMLESS_DUNDERS = frozenset({"__newobj__", "__newobj_ex__", "__new__"})
# Exact names inside a module the table flags whole that only return a number:
# reprlib.recursive_repr uses _thread.get_ident, so every by-value dataclass's
# __repr__ names it on 3.13.
_HARMLESS = frozenset(
    {"_thread.get_ident", "_thread.get_native_id", "threading.get_ident", "threading.get_native_id"}
)


def danger_of(module: str, name: str) -> str | None:
    """Why calling (or using) the global ``module``/``name`` is dangerous, or
    None if the table does not know it as dangerous.

    A dotted name is judged by every name it walks through: ``pathlib`` +
    ``os.system`` is ``os.system``, and ``builtins`` + ``eval.__call__`` is
    ``eval``. A dunder attribute on the way is dangerous in itself.
    """
    if f"{module}.{name}" in _HARMLESS:
        return None
    names = name.split(".")
    for part in names:
        if part.startswith("__") and part.endswith("__") and part not in _HARMLESS_DUNDERS:
            return _INTERNALS
    parts = [*module.split("."), *names]
    # The module is imported whole; the name is walked attribute by attribute,
    # and any attribute on the way may be another module (pathlib.os). So the
    # object may be known by the whole path, or by the path from any attribute
    # on: check each, with the module wildcards of its prefixes.
    first_attribute = len(parts) - len(names)
    for start in (0, *range(first_attribute, len(parts))):
        why = _lookup(parts[start:])
        if why is not None:
            return why
    through = _module_on_the_way(module, names)
    if through is not None:
        return f"walks through the module {through} (a class's qualified name never does)"
    return None


def _module_on_the_way(module: str, names: list[str]) -> str | None:
    """The module a dotted name walks through (``offsets`` + ``np.testing...``
    reaches numpy), found without importing or running anything: only modules
    this process already imported are looked into, by their ``__dict__``."""
    obj = sys.modules.get(module)
    for part in names[:-1]:
        if not isinstance(obj, types.ModuleType):
            return None
        obj = vars(obj).get(part)
        if isinstance(obj, types.ModuleType):
            return obj.__name__
    return None


# How modules commonly import numpy and pandas: the names a walk through a
# module that this process has not imported is likely to take.
_ALIASES = {"np": "numpy", "pd": "pandas"}


def _lookup(path: list[str]) -> str | None:
    if path[0] in _ALIASES:
        path = [_ALIASES[path[0]], *path[1:]]
    for stop in range(len(path), 0, -1):
        why = GADGETS.get(".".join(path[:stop])) if stop == len(path) else None
        why = why or GADGETS.get(".".join(path[:stop]) + ".*")
        if why is not None:
            return why
    return None
