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

from .errors import ForbiddenGlobalError

__all__ = ["DATA_ONLY", "AllowList"]

DATA_ONLY: frozenset[str] = frozenset(
    {
        # Builtin types: those the pickler reduces to a call, and those that
        # appear as data (a defaultdict's factory, a dtype's type).
        "builtins.bool",
        "builtins.bytearray",
        "builtins.bytes",
        "builtins.complex",
        "builtins.dict",
        "builtins.float",
        "builtins.frozenset",
        "builtins.int",
        "builtins.list",
        "builtins.range",
        "builtins.set",
        "builtins.slice",
        "builtins.str",
        "builtins.tuple",
        # What protocols < 3 use to rebuild bytes, and objects of protocols < 2.
        "_codecs.encode",
        "copyreg._reconstructor",
        "builtins.object",
        # Deterministic payloads whose data holds sets: (set1, ..., obj)[-1];
        # restricted loading hands out only that use of it (_last_item_getter).
        "operator.itemgetter",
        "collections.Counter",
        "collections.OrderedDict",
        "collections.defaultdict",
        "collections.deque",
        "datetime",
        "decimal.Decimal",
        "fractions.Fraction",
        "uuid.UUID",
        "zoneinfo.ZoneInfo",
        # numpy 2 and numpy 1 names
        "numpy.dtype",
        "numpy.ndarray",
        "numpy._core.multiarray._reconstruct",
        "numpy._core.multiarray.scalar",
        "numpy._core.numeric._frombuffer",
        "numpy.core.multiarray._reconstruct",
        "numpy.core.multiarray.scalar",
        "numpy.core.numeric._frombuffer",
        # pandas
        "pandas.DataFrame",
        "pandas.Series",
        "pandas.Index",
        "pandas.RangeIndex",
        "pandas.DatetimeIndex",
        "pandas.TimedeltaIndex",
        "pandas.PeriodIndex",
        "pandas.CategoricalIndex",
        "pandas.IntervalIndex",
        "pandas.MultiIndex",
        "pandas.Categorical",
        "pandas.CategoricalDtype",
        "pandas.StringDtype",
        "pandas.Interval",
        "pandas.Period",
        "pandas.Timestamp",
        "pandas.Timedelta",
        "pandas.arrays",
        # pandas 2 writes the same classes under the modules that define them
        "pandas._libs.interval.Interval",
        "pandas._libs.tslibs.period.Period",
        "pandas._libs.tslibs.timedeltas.Timedelta",
        "pandas._libs.tslibs.timestamps.Timestamp",
        "pandas.core.arrays.arrow.array.ArrowExtensionArray",
        "pandas.core.arrays.boolean.BooleanArray",
        "pandas.core.arrays.categorical.Categorical",
        "pandas.core.arrays.datetimes.DatetimeArray",
        "pandas.core.arrays.floating.FloatingArray",
        "pandas.core.arrays.integer.IntegerArray",
        "pandas.core.arrays.interval.IntervalArray",
        "pandas.core.arrays.numpy_.NumpyExtensionArray",
        "pandas.core.arrays.period.PeriodArray",
        "pandas.core.arrays.sparse.array.SparseArray",
        "pandas.core.arrays.string_.StringArray",
        "pandas.core.arrays.string_.StringDtype",
        "pandas.core.arrays.string_arrow.ArrowStringArray",
        "pandas.core.arrays.timedeltas.TimedeltaArray",
        "pandas.core.dtypes.dtypes.CategoricalDtype",
        "pandas.core.frame.DataFrame",
        "pandas.core.indexes.base.Index",
        "pandas.core.indexes.category.CategoricalIndex",
        "pandas.core.indexes.datetimes.DatetimeIndex",
        "pandas.core.indexes.interval.IntervalIndex",
        "pandas.core.indexes.multi.MultiIndex",
        "pandas.core.indexes.period.PeriodIndex",
        "pandas.core.indexes.range.RangeIndex",
        "pandas.core.indexes.timedeltas.TimedeltaIndex",
        "pandas.core.series.Series",
        "pandas._libs.arrays.__pyx_unpickle_NDArrayBacked",
        "pandas._libs.internals._unpickle_block",
        "pandas._libs.tslibs.offsets",
        "pandas._libs.tslibs.timedeltas._timedelta_unpickle",
        "pandas._libs.tslibs.timestamps._unpickle_timestamp",
        "pandas.core.indexes.base._new_Index",
        "pandas.core.indexes.datetimes._new_DatetimeIndex",
        "pandas.core.internals.managers.BlockManager",
        "pandas.core.internals.managers.SingleBlockManager",
    }
)

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
