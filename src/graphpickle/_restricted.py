"""Restricted loading: import only the globals an allow-list names.

A pickle can call anything it can import. With ``loads(data, allowed=...)`` the
unpickler imports only what the allow-list names and raises
:class:`ForbiddenGlobalError` for anything else, before it is imported.

An allow-list is a collection of strings:

- ``"module.qualname"``: that global (``"collections.OrderedDict"``);
- ``"module"``: every top-level global of exactly that module (``"datetime"``);
- ``"package.*"``: every top-level global of the package and of all its submodules.

Dotted names (``"module.Class.attr"``, which protocol 4 resolves attribute by
attribute) are allowed only by an exact entry: a whole-module entry would
otherwise reach ``module.__builtins__`` and everything beyond it.

:data:`DATA_ONLY` is a ready list for plain data: builtin containers and scalars,
``collections``, ``datetime``, ``decimal``, ``fractions``, ``uuid``, numpy arrays,
scalars and dtypes, pandas frames, series, indexes and their dtypes. Extend it
with set union: ``graphpickle.DATA_ONLY | {"mypackage.*"}``.

Functions pickled by value are code, so restricted loading refuses them (their
constructors live in ``cloudpickle``) with a message that says so.
"""

from __future__ import annotations

import _compat_pickle
import _pickle
from collections.abc import Iterable
from typing import IO, Any

from ._data_only import DATA_ONLY
from .errors import ForbiddenGlobalError

__all__ = ["DATA_ONLY", "AllowList"]

_BY_VALUE_MODULE = "cloudpickle.cloudpickle"


class AllowList:
    """A compiled allow-list: exact globals, whole modules, package prefixes."""

    __slots__ = ("_entries", "_prefixes")

    def __init__(self, entries: Iterable[str]) -> None:
        if isinstance(entries, str):
            raise TypeError("allowed must be a collection of names, not a single string")
        entries = set(entries)
        self._prefixes = tuple(e[:-2] for e in entries if e.endswith(".*"))
        self._entries = frozenset(e for e in entries if not e.endswith(".*"))

    def allows(self, module: str, name: str) -> bool:
        if f"{module}.{name}" in self._entries:
            return True
        if "." in name:
            # A dotted name walks attributes (protocol 4): "datetime" must not let
            # "datetime.__builtins__.get" through. Only an exact entry allows one.
            return False
        if module in self._entries:
            return True
        return any(module == p or module.startswith(p + ".") for p in self._prefixes)


class _RestrictedUnpickler(_pickle.Unpickler):
    def __init__(
        self,
        file: IO[bytes],
        allowed: AllowList,
        buffers: Iterable[Any] | None,
        **options: Any,
    ) -> None:
        super().__init__(file, buffers=buffers, **options)
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        # Check the name that will be imported; the base class maps it itself.
        imported_module, imported = imported_name(module, name)
        if not self._allowed.allows(imported_module, imported):
            raise ForbiddenGlobalError(
                _refusal(imported_module, imported), name=f"{imported_module}.{imported}"
            )
        if (imported_module, imported) == ("operator", "itemgetter"):
            return _last_item_getter
        return super().find_class(module, name)


def _last_item_getter(index: Any) -> Any:
    """``operator.itemgetter`` as restricted loading provides it: only what
    deterministic payloads use, ``itemgetter(-1)`` applied to a tuple. The real
    one would call ``__getitem__`` with any key on anything the list allows
    (pandas calls a callable key, a defaultdict its factory)."""
    if type(index) is not int or index != -1:
        raise ForbiddenGlobalError(
            f"restricted loading allows operator.itemgetter(-1) only, not itemgetter({index!r})",
            name="operator.itemgetter",
        )

    def last_item(items: Any) -> Any:
        if type(items) is not tuple:
            raise ForbiddenGlobalError(
                "restricted loading applies operator.itemgetter(-1) to tuples only, "
                f"not to {type(items).__qualname__}",
                name="operator.itemgetter",
            )
        return items[-1]

    return last_item


def imported_name(module: str, name: str) -> tuple[str, str]:
    """The global that loading imports for ``module``/``name`` as written: pickles
    of protocols < 3 use Python 2 names (``__builtin__.set``), which the
    unpickler maps to Python 3 ones."""
    module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def compile_allowed(allowed: Iterable[str]) -> AllowList:
    return allowed if isinstance(allowed, AllowList) else AllowList(allowed)


def _refusal(module: str, name: str) -> str:
    full = f"{module}.{name}"
    if module == _BY_VALUE_MODULE:
        return (
            f"restricted loading refused {full}: the payload holds a function or class "
            "pickled by value, which is code; restricted loading never loads code"
        )
    return (
        f"restricted loading refused the global {full}: it is not in the allow-list "
        f"(add {full!r}, {module!r} or '{module.split('.')[0]}.*' to allow it)"
    )


def restricted_load(
    file: IO[bytes],
    allowed: AllowList,
    buffers: Iterable[Any] | None,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    errors: str = "strict",
) -> Any:
    """Load one pickle from ``file``, importing only what ``allowed`` names
    (the other arguments are ``pickle.load``'s)."""
    unpickler = _RestrictedUnpickler(
        file, allowed, buffers, fix_imports=fix_imports, encoding=encoding, errors=errors
    )
    return unpickler.load()
