"""``DATA_ONLY``: the allow-list for plain data.

Exact globals that ordinary data pickles name: builtin containers and scalars,
``collections``, ``datetime`` (with ``zoneinfo``), ``decimal``, ``fractions``,
``uuid``, numpy arrays, scalars and dtypes, pandas frames, series, indexes and
their dtypes. Restricted loading (:mod:`graphpickle._restricted`) and
``inspect``'s verdict both read it.
"""

from __future__ import annotations

__all__ = ["DATA_ONLY"]

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
