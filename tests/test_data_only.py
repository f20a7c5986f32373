"""``DATA_ONLY``: exact names only, each a class or a data reconstructor, and the
data people send loads under it, from ``pickle.dumps`` and ``graphpickle.dumps``
payloads of every protocol from 2."""

from __future__ import annotations

import builtins
import collections
import datetime
import decimal
import fractions
import importlib
import importlib.util
import inspect
import math
import pickle
import types
import uuid
import warnings
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

import graphpickle
from graphpickle import DATA_ONLY

NUMPY_2 = np.lib.NumpyVersion(np.__version__) >= "2.0.0"
PANDAS = tuple(int(part) for part in pd.__version__.split(".")[:2])
PANDAS_3 = PANDAS >= (3, 0)
PARIS = zoneinfo.ZoneInfo("Europe/Paris")


class Missing:
    """A case this installation cannot build: its test is skipped, saying why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _builtins_cases() -> Iterator[tuple[str, Any]]:
    yield "none-bool-int", [None, True, False, 0, -1, 2**70, -(2**70)]
    yield "float", [0.0, -0.0, 1.5, math.inf, -math.inf]
    yield "str-bytes", ["", "caf\xe9 \u2603", b"", b"\x00\xff" * 10, bytearray(b"ab")]
    yield "containers", [[1, [2]], (1, (2,)), {"a": {1: 2}}, {1, 2}, frozenset({3})]
    yield "complex", [complex(1, 2), complex(-0.0, math.inf)]
    yield "range-slice", [range(3), range(10, 0, -3), slice(1, 5), slice(None, None, -1)]
    yield "empty", [[], (), {}, set(), frozenset(), bytearray()]
    # Types travel as data too: a defaultdict's factory, a column's Python type.
    yield "types", [bool, bytes, dict, float, int, list, str, tuple, set, frozenset, complex]
    try:
        templates = eval('[t"x={1 + 1!r:>4} {None}", t""]')  # (3.14's syntax)
    except SyntaxError:
        templates = Missing("template strings are 3.14's")
    yield "template-strings", templates
    frozendict = getattr(builtins, "frozendict", None)  # (3.15)
    yield "frozendict", (
        Missing("frozendict is 3.15's") if frozendict is None
        else [frozendict(a=1, b=[2]), frozendict(), {frozendict(k=(1, 2)): frozendict}]
    )  # fmt: skip


def _collections_cases() -> Iterator[tuple[str, Any]]:
    yield "ordereddict", collections.OrderedDict(b=1, a=2)
    yield "counter", collections.Counter("abracadabra")
    yield "defaultdict-list", collections.defaultdict(list, {"k": [1]})
    yield "defaultdict-int", collections.defaultdict(int, {"k": 1})
    yield "defaultdict-dict", collections.defaultdict(dict, {"k": {}})
    yield "defaultdict-none", collections.defaultdict(None, {"k": 1})
    yield "deque", collections.deque([1, 2, 3], maxlen=5)
    yield "chainmap", collections.ChainMap({"a": 1}, {"b": 2})
    yield "userdict", collections.UserDict(a=1)
    yield "userlist", collections.UserList([1, 2])
    yield "userstring", collections.UserString("abc")


def _time_cases() -> Iterator[tuple[str, Any]]:
    yield "date", datetime.date(2026, 1, 31)
    yield "time", datetime.time(12, 30, 15, 123456)
    yield "time-tz", datetime.time(12, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=-5)))
    yield "time-fold", datetime.time(1, 30, fold=1)
    yield "datetime", datetime.datetime(2026, 11, 29, 12, 1, 2, 3)
    yield "datetime-utc", datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.UTC)
    yield (
        "datetime-offset",
        datetime.datetime(
            2026, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=5, minutes=30), "IST")
        ),
    )
    yield "timedelta", datetime.timedelta(days=-3, seconds=5, microseconds=7)
    yield "timezone", [datetime.UTC, datetime.timezone(datetime.timedelta(hours=2))]
    yield "tzinfo-base", datetime.tzinfo()
    yield "timedelta-extremes", [datetime.timedelta.max, datetime.timedelta.min]
    yield "datetime-extremes", [datetime.datetime.max, datetime.date.min]


def _zoneinfo_cases() -> Iterator[tuple[str, Any]]:
    yield "zoneinfo", PARIS
    yield "zoneinfo-no-cache", zoneinfo.ZoneInfo.no_cache("America/New_York")
    yield "datetime-zoneinfo", datetime.datetime(2026, 7, 1, 9, tzinfo=PARIS)
    yield "datetime-zoneinfo-fold", datetime.datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=PARIS)
    yield "time-zoneinfo", datetime.time(9, tzinfo=PARIS)


def _pytz_cases() -> Iterator[tuple[str, Any]]:
    # pandas 2 turns zone names into pytz zones; pandas 3 no longer needs pytz.
    try:
        import pytz
    except ImportError:
        yield "pytz", Missing("pytz is not installed (pandas 3 does not need it)")
        return
    paris = pytz.timezone("Europe/Paris")
    yield "pytz-utc", pytz.utc
    yield "pytz-zone", paris
    yield "pytz-datetime", paris.localize(datetime.datetime(2026, 7, 1, 9))
    yield "pytz-fixed", pytz.FixedOffset(90)
    yield "pytz-timestamp", pd.Timestamp("2026-07-01 09:00", tz=paris)
    yield "pytz-datetimeindex", pd.date_range("2026-03-28", periods=3, tz=paris)


def _number_cases() -> Iterator[tuple[str, Any]]:
    yield "decimal", [decimal.Decimal("1.5"), decimal.Decimal("-0"), decimal.Decimal("1E+400")]
    yield "decimal-special", [decimal.Decimal("NaN"), decimal.Decimal("-Infinity")]
    yield "fraction", [fractions.Fraction(1, 3), fractions.Fraction(-7, 2)]
    yield "uuid", [uuid.UUID(int=7), uuid.uuid4()]
    yield "uuid-safe", uuid.UUID(int=9, is_safe=uuid.SafeUUID.safe)


def _numpy_cases() -> Iterator[tuple[str, Any]]:
    yield "ndarray-int", np.arange(6).reshape(2, 3)
    yield "ndarray-fortran", np.asfortranarray(np.arange(6.0).reshape(2, 3))
    yield "ndarray-0d", np.array(3.5)
    yield "ndarray-empty", np.empty((0, 4), dtype=np.int8)
    yield "ndarray-bool", np.array([True, False])
    yield "ndarray-complex", np.array([1 + 2j, 3j], dtype=np.complex64)
    yield "ndarray-bigendian", np.arange(4, dtype=">i4")
    yield "ndarray-str", np.array(["a", "bcd"])
    yield "ndarray-bytes", np.array([b"a", b"bcd"])
    yield "ndarray-datetime64", np.array(["2026-01-01", "NaT"], dtype="M8[ns]")
    yield "ndarray-timedelta64", np.array([1, 2], dtype="m8[s]")
    yield (
        "ndarray-structured",
        np.array(
            [(1, 2.5, b"ab"), (3, 4.5, b"cd")], dtype=[("a", "<i4"), ("b", "<f8"), ("c", "S2")]
        ),
    )
    yield (
        "ndarray-nested-structured",
        np.zeros(2, dtype=[("p", [("x", "f4"), ("y", "f4")]), ("m", "i2", (2, 2))]),
    )
    yield "ndarray-void", np.zeros(3, dtype="V4")
    yield "ndarray-object", np.array([1, "a", None, decimal.Decimal(1)], dtype=object)
    yield "ndarray-view", np.arange(10)[::3]
    yield "scalars", [np.float32(1.5), np.float64(2.5), np.int8(-3), np.uint64(2**64 - 1)]
    yield "scalars-more", [np.bool_(True), np.complex128(1j), np.float16(0.5), np.longdouble(1)]
    yield "scalar-str", [np.str_("abc"), np.bytes_(b"abc")]
    yield "scalar-datetime64", [np.datetime64("2026-01-01"), np.datetime64("NaT", "ns")]
    yield "scalar-timedelta64", np.timedelta64(5, "h")
    yield "scalar-void", np.zeros(1, dtype=[("a", "i4"), ("b", "f8")])[0]
    yield "dtypes", [np.dtype("f8"), np.dtype(">i2"), np.dtype("U5"), np.dtype("S3"), np.dtype("O")]
    yield "dtypes-time", [np.dtype("M8[s]"), np.dtype("m8[ns]"), np.dtype("M8")]
    yield (
        "dtype-structured",
        np.dtype({"names": ["a", "b"], "formats": ["i4", "f8"], "offsets": [0, 8]}),
    )
    yield "dtype-subarray", np.dtype(("f4", (2, 3)))
    yield "dtype-aligned", np.dtype([("a", "i1"), ("b", "f8")], align=True)
    if NUMPY_2:
        string_dtype = np.dtypes.StringDType()
        yield "ndarray-stringdtype", np.array(["a", "bcd", ""], dtype=string_dtype)
        yield "dtype-stringdtype", string_dtype
        yield "dtype-stringdtype-na", np.dtypes.StringDType(na_object=None, coerce=False)
    else:
        yield "stringdtype", Missing(f"numpy {np.__version__} has no StringDType (numpy 2 adds it)")


def _pandas_cases() -> Iterator[tuple[str, Any]]:
    days = pd.date_range("2026-01-01", periods=3, freq="D")
    yield (
        "dataframe",
        pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}, index=pd.Index([3, 4], name="i")),
    )
    yield (
        "dataframe-mixed",
        pd.DataFrame(
            {
                "f": [1.5, np.nan],
                "b": [True, False],
                "o": [None, "x"],
                "t": days[:2],
                "c": ["u", "v"],
            }
        ).astype({"c": "category"}),
    )
    yield (
        "dataframe-multiindex-columns",
        pd.DataFrame([[1, 2], [3, 4]], columns=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)])),
    )
    yield "dataframe-empty", pd.DataFrame()
    yield (
        "dataframe-nullable",
        pd.DataFrame(
            {
                "i": pd.array([1, None], dtype="Int64"),
                "b": pd.array([True, None], dtype="boolean"),
                "f": pd.array([0.5, None], dtype="Float64"),
                "s": pd.array(["a", None], dtype="string"),
            }
        ),
    )
    frame = pd.DataFrame({"a": [1]})
    frame.attrs["unit"] = "m"
    yield "dataframe-attrs", frame
    yield "dataframe-flags", pd.DataFrame({"a": [1]}).set_flags(allows_duplicate_labels=False)
    yield "series", pd.Series([1.5, 2.5], name="s", index=days[:2])
    yield "series-object", pd.Series([1, "a", None])
    yield "series-str", pd.Series(["a", "b", None])
    yield "series-category", pd.Series(["a", "b", "a"], dtype="category")
    yield "series-datetime-tz", pd.Series(pd.date_range("2026-01-01", periods=2, tz="UTC"))
    yield "series-timedelta", pd.Series(pd.to_timedelta([1, 2], unit="D"))
    yield "series-period", pd.Series(pd.period_range("2026-01", periods=2, freq="M"))
    yield "series-interval", pd.Series(pd.interval_range(0, 3))
    yield "series-sparse", pd.Series(pd.arrays.SparseArray([0, 0, 1, 0]))
    yield "series-sparse-float", pd.Series(pd.arrays.SparseArray([np.nan, 1.0]))
    for dtype in ["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64"]:
        yield f"series-{dtype}", pd.Series([1, None, 3], dtype=dtype)
    for dtype in ["Float32", "Float64", "boolean", "string"]:
        yield f"series-{dtype}", pd.Series([1, None], dtype=dtype).astype(dtype)
    yield "index", pd.Index([1, 2, 3], name="n")
    yield "index-float", pd.Index([1.5, np.nan])
    yield "index-object", pd.Index(["a", None, 1], dtype=object)
    yield "index-str", pd.Index(["a", "b"])
    yield "index-bool", pd.Index([True, False])
    yield "index-nullable", pd.Index([1, None], dtype="Int64")
    yield "index-string", pd.Index(["a", None], dtype="string")
    yield "rangeindex", pd.RangeIndex(2, 20, 3, name="r")
    yield "datetimeindex", days
    yield "datetimeindex-nofreq", pd.DatetimeIndex(["2026-01-01", "2026-03-01", "NaT"])
    yield "datetimeindex-utc", pd.date_range("2026-01-01", periods=3, freq="h", tz="UTC")
    yield "datetimeindex-zoneinfo", pd.date_range("2026-01-01", periods=3, tz=PARIS)
    yield "datetimeindex-tz-string", pd.date_range("2026-03-28", periods=3, tz="America/New_York")
    yield (
        "datetimeindex-offset-tz",
        pd.date_range("2026-01-01", periods=2, tz=datetime.timezone(datetime.timedelta(hours=3))),
    )
    yield "timedeltaindex", pd.timedelta_range("1 day", periods=3, freq="6h")
    yield "periodindex", pd.period_range("2026-01", periods=3, freq="M")
    yield (
        "categoricalindex",
        pd.CategoricalIndex(["a", "b", "a"], categories=["b", "a"], ordered=True),
    )
    yield "intervalindex", pd.IntervalIndex.from_breaks([0, 1.5, 3], closed="left")
    yield "multiindex", pd.MultiIndex.from_tuples([(1, "a"), (2, "b")], names=["n", "s"])
    yield "categorical", pd.Categorical(["a", "b", None], categories=["a", "b", "c"])
    yield "categorical-dtype", pd.CategoricalDtype(["x", "y"], ordered=True)
    yield "timestamp", pd.Timestamp("2026-01-01 12:00:00.000000001")
    yield "timestamp-utc", pd.Timestamp("2026-01-01", tz="UTC")
    yield "timestamp-zoneinfo", pd.Timestamp("2026-07-01 09:00", tz=PARIS)
    yield "timestamp-tz-string", pd.Timestamp("2026-07-01 09:00", tz="Asia/Tokyo")
    yield "timestamp-unit", pd.Timestamp("2026-01-01").as_unit("s")
    yield "timedelta", pd.Timedelta("1D 2h 3ns")
    yield "period", [pd.Period("2026-01", "M"), pd.Period("2026Q1", "Q"), pd.Period("2026", "Y")]
    yield "period-more", [pd.Period("2026-01-01", "D"), pd.Period("2026-01-01 10:00", "h")]
    yield "period-business", pd.Period("2026-01-05", "B")
    yield "period-week", pd.Period("2026-01-05", "W")
    yield "interval", [pd.Interval(0, 1), pd.Interval(0.5, 2.5, closed="both")]
    yield "interval-time", pd.Interval(pd.Timestamp("2026"), pd.Timestamp("2027"))
    yield "na", [pd.NA, pd.NaT]
    yield "dtypes", [pd.Int64Dtype(), pd.UInt8Dtype(), pd.Float32Dtype(), pd.BooleanDtype()]
    yield "dtype-string", pd.StringDtype("python")
    yield "dtype-datetimetz", pd.DatetimeTZDtype("ns", "UTC")
    yield "dtype-period", pd.PeriodDtype("M")
    yield "dtype-interval", pd.IntervalDtype("int64", "right")
    yield "dtype-sparse", pd.SparseDtype("float64", np.nan)
    yield (
        "arrays",
        [
            pd.array([1, None], dtype="Int32"),
            pd.array([True, None], dtype="boolean"),
            pd.array(["a", None], dtype="string"),
            pd.array([0.5, None], dtype="Float32"),
        ],
    )
    yield "array-datetime", pd.array(pd.date_range("2026", periods=2, tz=PARIS))
    yield "array-timedelta", pd.array(pd.to_timedelta([1, 2], unit="s"))
    yield "array-period", pd.array(pd.period_range("2026", periods=2, freq="Y"))
    yield "array-interval", pd.arrays.IntervalArray.from_breaks([0, 1, 2])
    yield "array-numpy", pd.array(np.arange(3))
    yield "array-numpy-object", pd.arrays.NumpyExtensionArray(np.array(["a", 1], dtype=object))
    yield "array-sparse", pd.arrays.SparseArray([0, 0, 2], fill_value=0)
    yield "array-sparse-block", pd.arrays.SparseArray([0, 1, 1, 0, 2], kind="block")


# Frequencies as pandas spells them (2.2 renamed the month-end ones and more):
# what a date range, a period and an offset object carry.
_FREQS = ["D", "B", "W", "W-MON", "MS", "BMS", "QS", "YS", "SMS", "min", "s", "ms", "us", "ns"]
_FREQS += (
    ["ME", "BME", "QE", "YE", "SME", "h", "bh"]
    if PANDAS >= (2, 2)
    else ["M", "BM", "Q", "Y", "SM", "H", "BH"]
)


def _offset_cases() -> Iterator[tuple[str, Any]]:
    offsets = pd.offsets
    for freq in _FREQS:
        yield f"date_range-{freq}", pd.date_range("2026-01-05", periods=3, freq=freq)
    for freq in ["D", "W", "M", "Q", "Y", "h", "min", "s", "B"]:
        yield f"period_range-{freq}", pd.period_range("2026-01-05", periods=2, freq=freq)
    # Every public offset class, once (aliases such as BDay name the same class).
    public = (getattr(offsets, name) for name in dir(offsets) if not name.startswith("_"))
    classes = {c for c in public if isinstance(c, type) and issubclass(c, offsets.BaseOffset)}
    for cls in sorted(classes - {offsets.BaseOffset, offsets.Tick}, key=lambda c: c.__name__):
        yield f"offset-{cls.__name__}", cls()
    yield (
        "offsets-parameters",
        [
            offsets.Day(2),
            offsets.Hour(-3, normalize=False),
            offsets.BusinessDay(2, normalize=True),
            offsets.Week(weekday=0),
            offsets.WeekOfMonth(week=1, weekday=2),
            offsets.QuarterEnd(startingMonth=2),
            offsets.YearEnd(month=6),
            offsets.FY5253(weekday=0, startingMonth=1, variation="nearest"),
            offsets.BusinessHour(start="08:30", end="17:00"),
        ],
    )
    yield "offset-dateoffset-relative", offsets.DateOffset(months=2, days=1)
    yield "offset-dateoffset-weekday", offsets.DateOffset(weekday=0, day=1)
    yield "offset-custom-business-day", offsets.CustomBusinessDay(holidays=["2026-01-06"])
    yield "offset-custom-business-weekmask", offsets.CustomBusinessDay(weekmask="Mon Wed")


CASES: dict[str, Callable[[], Iterator[tuple[str, Any]]]] = {
    "builtins": _builtins_cases,
    "collections": _collections_cases,
    "datetime": _time_cases,
    "zoneinfo": _zoneinfo_cases,
    "pytz": _pytz_cases,
    "numbers": _number_cases,
    "numpy": _numpy_cases,
    "pandas": _pandas_cases,
    "offsets": _offset_cases,
}


def corpus() -> dict[str, Any]:
    return {f"{group}:{name}": obj for group, cases in CASES.items() for name, obj in cases()}


with warnings.catch_warnings():
    # pandas 3 deprecates business-day periods; they still travel.
    warnings.filterwarnings("ignore", "Period.*BDay|PeriodDtype\\[B\\]", FutureWarning)
    CORPUS = corpus()

# Names that only some of the tested numpy and pandas versions define.
_SOME_VERSIONS = {
    "builtins.frozendict": "Python >= 3.15",
    "string.templatelib.Interpolation": "Python >= 3.14",
    "string.templatelib._template_unpickle": "Python >= 3.14",
    "numpy._core._internal._convert_to_stringdtype_kwargs": "numpy >= 2",
    "numpy._core.multiarray._reconstruct": "numpy >= 2",
    "numpy._core.multiarray.scalar": "numpy >= 2",
    "numpy._core.numeric._frombuffer": "numpy >= 2",
    "pandas._libs.tslibs.nattype._nat_unpickle": "pandas >= 3",
    "pandas._libs.tslibs.nattype.__nat_unpickle": "pandas < 3",
    "pandas.core.indexes.timedeltas._new_TimedeltaIndex": "pandas >= 3",
    "pandas._libs.tslibs.offsets.BHalfYearBegin": "pandas >= 3",
    "pandas._libs.tslibs.offsets.BHalfYearEnd": "pandas >= 3",
    "pandas._libs.tslibs.offsets.HalfYearBegin": "pandas >= 3",
    "pandas._libs.tslibs.offsets.HalfYearEnd": "pandas >= 3",
}
# Entries that name a data constant rather than a class or a function.
_CONSTANTS = {"pandas.NA": pd.NA, "pandas._libs.missing.NA": pd.NA}


def _resolve(full: str) -> Any:
    """Import the longest module prefix of ``full`` and walk the rest as a
    qualname, refusing to pass through a module (as restricted loading does)."""
    parts = full.split(".")
    assert len(parts) > 1, f"{full} is a bare module name, not module.qualname"
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == parts[0]:
                pytest.skip(f"{parts[0]} is not installed")
            continue
        for attr in parts[split:]:
            if not hasattr(obj, attr) and full in _SOME_VERSIONS:
                pytest.skip(f"{full} exists only with {_SOME_VERSIONS[full]}")
            obj = getattr(obj, attr)
            assert not isinstance(obj, types.ModuleType), f"{full} reaches the module {obj}"
        return obj
    raise AssertionError(f"no module prefix of {full} imports")


@pytest.mark.filterwarnings("ignore:numpy.core.* is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", sorted(DATA_ONLY))
def test_every_name_is_a_class_or_a_function(name):
    obj = _resolve(name)
    if name in _CONSTANTS:
        assert obj is _CONSTANTS[name]
        return
    # Cython functions (pandas' reconstructors) are routines but not FunctionType.
    assert isinstance(obj, type) or inspect.isroutine(obj), f"{name} is a {type(obj)}"


def test_no_whole_module_or_wildcard_entries():
    assert isinstance(DATA_ONLY, frozenset)
    for name in DATA_ONLY:
        assert "*" not in name and "." in name, name
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a parent is a class ("zoneinfo.ZoneInfo") or missing
            spec = None
        assert spec is None, f"{name} is a module"


# (name, protocol, dumps): pickle's and graphpickle's at every protocol, then
# graphpickle's out-of-band buffers and deterministic payloads (protocol 5).
_DUMPERS = [
    *((f"pickle-p{p}", p, lambda x, p=p: (pickle.dumps(x, p), None)) for p in range(6)),
    *((f"graphpickle-p{p}", p, lambda x, p=p: (graphpickle.dumps(x, p), None)) for p in range(6)),
    ("graphpickle-p5-out-of-band", 5, lambda x: _out_of_band(x)),
    ("deterministic", 5, lambda x: (graphpickle.dumps(x, deterministic=True), None)),
]


def _out_of_band(obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    return graphpickle.dumps(obj, 5, buffer_callback=buffers.append), buffers


# What pickle itself cannot write below some protocol, or loses there: the
# restricted load is then compared with what pickle.loads builds.
_PICKLE_NEEDS = {
    "offsets:offset-dateoffset-weekday": 2,  # dateutil's weekday: __slots__
    "builtins:frozendict": 2,  # 3.15's copyreg: "cannot pickle 'frozendict' object"
}
if not PANDAS_3:  # pandas 2's DateOffset.__reduce_ex__ fails below protocol 2
    _PICKLE_NEEDS |= {"offsets:offset-DateOffset": 2, "offsets:offset-dateoffset-relative": 2}
_PICKLE_LOSES_BELOW = {
    "datetime:time-fold": 4,  # CPython writes fold from protocol 4
    "zoneinfo:datetime-zoneinfo-fold": 4,
    "numpy:ndarray-bigendian": 5,  # numpy writes the data in native byte order
}


# Python 3.11-3.13 pickle a ZoneInfo as getattr(ZoneInfo, "_unpickle")(key, ...),
# which restricted loading resolves as the DATA_ONLY entry zoneinfo.ZoneInfo._unpickle.
@pytest.mark.filterwarnings("ignore:Period with BDay freq:FutureWarning")
@pytest.mark.filterwarnings("ignore:PeriodDtype\\[B\\] is deprecated:FutureWarning")
@pytest.mark.parametrize(("how", "protocol", "dump"), _DUMPERS, ids=[d[0] for d in _DUMPERS])
@pytest.mark.parametrize("case", list(CORPUS))
def test_data_round_trips_under_data_only(case, how, protocol, dump):
    original = CORPUS[case]
    if isinstance(original, Missing):
        pytest.skip(original.reason)
    if protocol < _PICKLE_NEEDS.get(case, 0):
        pytest.skip(f"pickle cannot write {case} below protocol {_PICKLE_NEEDS[case]}")
    data, buffers = dump(original)
    loaded = graphpickle.loads(data, buffers=buffers, allowed=DATA_ONLY)
    _assert_same(loaded, pickle.loads(data, buffers=buffers))
    if protocol >= _PICKLE_LOSES_BELOW.get(case, 0):
        _assert_same(loaded, original)


def _assert_same(loaded: Any, original: Any) -> None:
    assert type(loaded) is type(original)
    if original is pd.NA or original is pd.NaT:
        assert loaded is original
    elif isinstance(original, zoneinfo.ZoneInfo):
        # Zones made with no_cache compare by identity: compare what they are.
        assert loaded.key == original.key
    elif isinstance(original, pd.DataFrame):
        pd.testing.assert_frame_equal(loaded, original, check_flags=True)
        assert loaded.attrs == original.attrs
    elif isinstance(original, pd.Series):
        pd.testing.assert_series_equal(loaded, original, check_flags=True)
    elif isinstance(original, pd.Index):
        pd.testing.assert_index_equal(loaded, original, exact=True)
        assert getattr(loaded, "freq", None) == getattr(original, "freq", None)
    elif isinstance(original, pd.api.extensions.ExtensionArray):
        pd.testing.assert_extension_array_equal(loaded, original)
    elif isinstance(original, np.ndarray):
        assert (loaded.dtype, loaded.shape) == (original.dtype, original.shape)
        if original.flags.f_contiguous and not original.flags.c_contiguous:
            assert loaded.flags.f_contiguous  # Fortran order survives
        np.testing.assert_array_equal(loaded, original)
    elif isinstance(original, list | tuple | collections.deque | collections.UserList):
        assert len(loaded) == len(original)
        for a, b in zip(loaded, original, strict=True):
            _assert_same(a, b)
        assert getattr(loaded, "maxlen", None) == getattr(original, "maxlen", None)
    elif isinstance(original, dict | collections.UserDict | collections.ChainMap):
        assert list(loaded) == list(original)
        for key in original:
            _assert_same(loaded[key], original[key])
        if isinstance(original, collections.defaultdict):
            assert loaded.default_factory is original.default_factory
        if isinstance(original, collections.ChainMap):
            assert loaded.maps == original.maps
    elif isinstance(original, set | frozenset):
        assert loaded == original
    elif type(original).__qualname__ == "Template":  # (3.14's: compared by identity)
        assert loaded.strings == original.strings
        fields = ("value", "expression", "conversion", "format_spec")
        for a, b in zip(loaded.interpolations, original.interpolations, strict=True):
            assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    else:
        # Scalars, dtypes, zones, offsets: repr tells apart what == does not
        # (-0.0, Decimal exponents, tz names, dtype layouts); == checks the value
        # where a value equals itself (not NaN, NaT).
        if type(original).__repr__ is object.__repr__:  # a bare tzinfo(): no value
            assert getattr(loaded, "__dict__", None) == getattr(original, "__dict__", None)
            return
        assert repr(loaded) == repr(original)
        assert getattr(loaded, "unit", None) == getattr(original, "unit", None)
        if bool(original == original):
            assert loaded == original


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


def test_extending_data_only_with_set_union():
    name = f"{Point.__module__}.{Point.__qualname__}"
    data = graphpickle.dumps({"p": Point(1, 2), "when": datetime.date(2026, 1, 1)})
    with pytest.raises(graphpickle.ForbiddenGlobalError) as info:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert info.value.name == name
    extended = DATA_ONLY | {name}
    assert isinstance(extended, frozenset) and name not in DATA_ONLY
    assert graphpickle.loads(data, allowed=extended) == {
        "p": Point(1, 2),
        "when": datetime.date(2026, 1, 1),
    }
