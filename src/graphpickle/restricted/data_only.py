"""``DATA_ONLY``: the allow-list for plain data.

Exact ``"module.qualname"`` names only, never a whole module: builtin containers
and scalars, ``collections``, ``datetime`` (with ``zoneinfo`` and pandas 2's
``pytz``), ``decimal``, ``fractions``, ``uuid``, numpy arrays, scalars and dtypes,
pandas frames, series, indexes, their extension arrays and dtypes, scalars and
offsets. Restricted loading (:mod:`graphpickle._restricted`) and ``inspect``'s
verdict both read it.

The names are those that ``pickle.dumps`` and ``graphpickle.dumps`` (protocols 0
to 5, deterministic payloads, out-of-band buffers) write for that data with
numpy 1.26, 2.0, 2.4 and 2.5 and pandas 2.1, 2.2 and 3.1 on Python 3.11-3.15
(``tests/test_data_only.py`` holds the corpus). A name that another version does not define simply fails to
resolve. Each one is a class, or a function that rebuilds data from its
arguments: none evaluates text, imports by a name the payload chooses, opens a
file the payload names or calls what it is given (beyond allowed classes), and
none is a getter of arbitrary state. Reconstructors that hand back a cached or
singleton object (a zone, ``NaT``, a dtype) are fine: restricted loading lets a
payload change only what it created. pandas turns a time-zone *string* into a
zone, and ``"dateutil/<path>"`` makes dateutil open that path
(``DatetimeTZDtype("ns", "dateutil//etc/passwd")``, or ``_new_DatetimeIndex``
with such a ``tz``): restricted loading refuses such a string in a call of a
pandas name (pickles that pandas writes carry zone objects).

``builtins.getattr`` (which ``ZoneInfo`` pickles name, see the zoneinfo group)
is not listed: restricted loading resolves ``getattr(G, "name")`` of a global
``G`` as the dotted name ``G.name``, which must be listed. Left out on purpose:
pyarrow-backed pandas data (pyarrow's reconstructors are
not reviewed here), ``dateutil.tz`` zones (``tzfile`` opens any path it is
given) and numpy masked arrays.
"""

from __future__ import annotations

__all__ = ["DATA_ONLY"]

DATA_ONLY: frozenset[str] = frozenset(
    {
        # -- Python ------------------------------------------------------------
        # Builtin types: those the pickler reduces to a call (complex, range,
        # slice, bytearray; bytes and sets at protocols < 3), and those that
        # travel as data: a defaultdict's factory, a dtype's type.
        "builtins.bool",
        "builtins.bytearray",
        "builtins.bytes",
        "builtins.complex",
        "builtins.dict",
        "builtins.float",
        "builtins.frozenset",
        "builtins.frozendict",  # (3.15: an immutable dict; its hash is cached)
        "builtins.int",
        "builtins.list",
        "builtins.range",
        "builtins.set",
        "builtins.slice",
        "builtins.str",
        "builtins.tuple",
        # Protocols < 3 write bytes as _codecs.encode(str, "latin1") (restricted
        # loading hands out only that use); protocols < 2 rebuild instances of
        # pure-Python classes (ChainMap, UserDict...) with copyreg._reconstructor,
        # which creates an instance of the (allowed) class it is given.
        "_codecs.encode",
        "copyreg._reconstructor",
        "builtins.object",
        # Deterministic payloads whose data holds sets: (set1, ..., obj)[-1];
        # restricted loading hands out only that use of it (_last_item_getter).
        "operator.itemgetter",
        # 3.14's template strings: a Template is rebuilt from its strings and
        # Interpolation(value, expression text, conversion, format spec); the
        # expression is text, never evaluated.
        "string.templatelib.Interpolation",
        "string.templatelib._template_unpickle",
        # collections: containers; each rebuilds itself from its items.
        "collections.ChainMap",
        "collections.Counter",
        "collections.OrderedDict",
        "collections.UserDict",
        "collections.UserList",
        "collections.UserString",
        "collections.defaultdict",
        "collections.deque",
        # datetime: every class. tzinfo is the abstract base a bare tzinfo()
        # pickles as; fixed offsets (UTC included) are timezone(timedelta).
        "datetime.date",
        "datetime.datetime",
        "datetime.time",
        "datetime.timedelta",
        "datetime.timezone",
        "datetime.tzinfo",
        # zoneinfo: a zone pickles as a call of ZoneInfo._unpickle(key, from_cache),
        # which loads the zone file named by the key from the time-zone path or
        # the tzdata package (ZoneInfo refuses absolute keys and keys that leave
        # that path). Python 3.11-3.13 write it as builtins.getattr(ZoneInfo,
        # "_unpickle"); getattr itself is not data, so a loader resolves that pair
        # only as the exact dotted entry below.
        "zoneinfo.ZoneInfo",
        "zoneinfo.ZoneInfo._unpickle",
        # pytz (pandas 2 turns zone names into pytz zones): _p(zone, utcoffset,
        # dstoffset, tzname) looks the zone up in pytz's own database, which
        # accepts only the names it lists; _UTC() returns pytz.utc; FixedOffset
        # builds (and caches) a fixed-offset zone from minutes.
        "pytz._p",
        "pytz._UTC",
        "pytz.FixedOffset",
        # dateutil: what a pandas DateOffset with calendar fields (months=2,
        # weekday=0) holds; plain classes rebuilt from their attributes.
        "dateutil.relativedelta.relativedelta",
        "dateutil._common.weekday",
        # Numbers and identifiers: classes rebuilt from a string or integers.
        "decimal.Decimal",
        "fractions.Fraction",
        "uuid.UUID",
        # -- numpy: numpy 2 names (_core), then numpy 1 names (core) --------------
        # An array is _reconstruct(ndarray, shape, dtype) then its state, or
        # _frombuffer(buffer, dtype, shape, order) (protocol 5); a scalar is
        # scalar(dtype, bytes); numpy 2's StringDType is rebuilt from its options.
        # Object arrays hold their items as ordinary pickled objects, each checked.
        "numpy.dtype",
        "numpy.ndarray",
        "numpy._core._internal._convert_to_stringdtype_kwargs",
        "numpy._core.multiarray._reconstruct",
        "numpy._core.multiarray.scalar",
        "numpy._core.numeric._frombuffer",
        "numpy.core.multiarray._reconstruct",
        "numpy.core.multiarray.scalar",
        "numpy.core.numeric._frombuffer",
        # -- pandas 3: classes under their public names --------------------------
        "pandas.DataFrame",
        "pandas.Series",
        "pandas.Index",
        "pandas.CategoricalIndex",
        "pandas.DatetimeIndex",
        "pandas.IntervalIndex",
        "pandas.MultiIndex",
        "pandas.PeriodIndex",
        "pandas.RangeIndex",
        "pandas.TimedeltaIndex",
        "pandas.Categorical",
        "pandas.DateOffset",
        "pandas.Interval",
        "pandas.Period",
        "pandas.BooleanDtype",
        "pandas.CategoricalDtype",
        "pandas.DatetimeTZDtype",
        "pandas.Float32Dtype",
        "pandas.Float64Dtype",
        "pandas.Int8Dtype",
        "pandas.Int16Dtype",
        "pandas.Int32Dtype",
        "pandas.Int64Dtype",
        "pandas.UInt8Dtype",
        "pandas.UInt16Dtype",
        "pandas.UInt32Dtype",
        "pandas.UInt64Dtype",
        "pandas.IntervalDtype",
        "pandas.PeriodDtype",
        "pandas.SparseDtype",
        "pandas.StringDtype",
        "pandas.arrays.BooleanArray",
        "pandas.arrays.DatetimeArray",
        "pandas.arrays.FloatingArray",
        "pandas.arrays.IntegerArray",
        "pandas.arrays.IntervalArray",
        "pandas.arrays.NumpyExtensionArray",
        "pandas.arrays.PeriodArray",
        "pandas.arrays.SparseArray",
        "pandas.arrays.StringArray",
        "pandas.arrays.TimedeltaArray",
        # pandas.NA is the missing-value singleton itself, not a class: a pickle
        # names it as a constant (pandas 2: pandas._libs.missing.NA).
        "pandas.NA",
        # -- pandas 2: the same classes under the modules that define them ---------
        "pandas._libs.interval.Interval",
        "pandas._libs.missing.NA",
        "pandas._libs.tslibs.offsets.DateOffset",
        "pandas._libs.tslibs.period.Period",
        "pandas.core.arrays.boolean.BooleanArray",
        "pandas.core.arrays.boolean.BooleanDtype",
        "pandas.core.arrays.categorical.Categorical",
        "pandas.core.arrays.datetimes.DatetimeArray",
        "pandas.core.arrays.floating.Float32Dtype",
        "pandas.core.arrays.floating.Float64Dtype",
        "pandas.core.arrays.floating.FloatingArray",
        "pandas.core.arrays.integer.Int8Dtype",
        "pandas.core.arrays.integer.Int16Dtype",
        "pandas.core.arrays.integer.Int32Dtype",
        "pandas.core.arrays.integer.Int64Dtype",
        "pandas.core.arrays.integer.IntegerArray",
        "pandas.core.arrays.integer.UInt8Dtype",
        "pandas.core.arrays.integer.UInt16Dtype",
        "pandas.core.arrays.integer.UInt32Dtype",
        "pandas.core.arrays.integer.UInt64Dtype",
        "pandas.core.arrays.interval.IntervalArray",
        "pandas.core.arrays.numpy_.NumpyExtensionArray",
        "pandas.core.arrays.period.PeriodArray",
        "pandas.core.arrays.sparse.array.SparseArray",
        "pandas.core.arrays.string_.StringArray",
        "pandas.core.arrays.string_.StringDtype",
        "pandas.core.arrays.timedeltas.TimedeltaArray",
        "pandas.core.dtypes.dtypes.CategoricalDtype",
        "pandas.core.dtypes.dtypes.DatetimeTZDtype",
        "pandas.core.dtypes.dtypes.IntervalDtype",
        "pandas.core.dtypes.dtypes.PeriodDtype",
        "pandas.core.dtypes.dtypes.SparseDtype",
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
        # -- pandas, every version: names that did not move ----------------------
        # The dtype of a NumpyExtensionArray; a frame's blocks and managers.
        "pandas.core.dtypes.dtypes.NumpyEADtype",
        "pandas.core.internals.managers.BlockManager",
        "pandas.core.internals.managers.SingleBlockManager",
        "pandas._libs.sparse.BlockIndex",
        "pandas._libs.sparse.IntIndex",
        # Reconstructors: each builds an instance of the class it is given (which
        # must be allowed itself) from arrays and attributes, or a scalar from
        # integers (_unpickle_timestamp, _timedelta_unpickle); the NaT ones
        # return the NaT singleton (pandas 2 spells it __nat_unpickle).
        "pandas._libs.arrays.__pyx_unpickle_NDArrayBacked",
        "pandas._libs.internals._unpickle_block",
        "pandas._libs.interval.__pyx_unpickle_IntervalMixin",
        "pandas._libs.tslibs.nattype._nat_unpickle",
        "pandas._libs.tslibs.nattype.__nat_unpickle",
        "pandas._libs.tslibs.timedeltas._timedelta_unpickle",
        "pandas._libs.tslibs.timestamps._unpickle_timestamp",
        "pandas.core.indexes.base._new_Index",
        "pandas.core.indexes.datetimes._new_DatetimeIndex",
        "pandas.core.indexes.interval._new_IntervalIndex",
        "pandas.core.indexes.timedeltas._new_TimedeltaIndex",
        # Offsets: what frequencies (date ranges, periods, PeriodDtype) and offset
        # objects pickle as; every public offset class (the half-year ones are
        # pandas 3's), each rebuilt from n, normalize and its own parameters.
        "pandas._libs.tslibs.offsets.BHalfYearBegin",
        "pandas._libs.tslibs.offsets.BHalfYearEnd",
        "pandas._libs.tslibs.offsets.BQuarterBegin",
        "pandas._libs.tslibs.offsets.BQuarterEnd",
        "pandas._libs.tslibs.offsets.BYearBegin",
        "pandas._libs.tslibs.offsets.BYearEnd",
        "pandas._libs.tslibs.offsets.BusinessDay",
        "pandas._libs.tslibs.offsets.BusinessHour",
        "pandas._libs.tslibs.offsets.BusinessMonthBegin",
        "pandas._libs.tslibs.offsets.BusinessMonthEnd",
        "pandas._libs.tslibs.offsets.CustomBusinessDay",
        "pandas._libs.tslibs.offsets.CustomBusinessHour",
        "pandas._libs.tslibs.offsets.CustomBusinessMonthBegin",
        "pandas._libs.tslibs.offsets.CustomBusinessMonthEnd",
        "pandas._libs.tslibs.offsets.Day",
        "pandas._libs.tslibs.offsets.Easter",
        "pandas._libs.tslibs.offsets.FY5253",
        "pandas._libs.tslibs.offsets.FY5253Quarter",
        "pandas._libs.tslibs.offsets.HalfYearBegin",
        "pandas._libs.tslibs.offsets.HalfYearEnd",
        "pandas._libs.tslibs.offsets.Hour",
        "pandas._libs.tslibs.offsets.LastWeekOfMonth",
        "pandas._libs.tslibs.offsets.Micro",
        "pandas._libs.tslibs.offsets.Milli",
        "pandas._libs.tslibs.offsets.Minute",
        "pandas._libs.tslibs.offsets.MonthBegin",
        "pandas._libs.tslibs.offsets.MonthEnd",
        "pandas._libs.tslibs.offsets.Nano",
        "pandas._libs.tslibs.offsets.QuarterBegin",
        "pandas._libs.tslibs.offsets.QuarterEnd",
        "pandas._libs.tslibs.offsets.Second",
        "pandas._libs.tslibs.offsets.SemiMonthBegin",
        "pandas._libs.tslibs.offsets.SemiMonthEnd",
        "pandas._libs.tslibs.offsets.Week",
        "pandas._libs.tslibs.offsets.WeekOfMonth",
        "pandas._libs.tslibs.offsets.YearBegin",
        "pandas._libs.tslibs.offsets.YearEnd",
    }
)
