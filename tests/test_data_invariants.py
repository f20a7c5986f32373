"""Admitted types keep their invariants: a pickled state whose codes, positions,
lengths or flags were changed either is refused, or gives an object that can
be used without crashing the process (data_checks.py).

Each mutated payload is loaded with ``allowed=DATA_ONLY`` in a child
interpreter that then uses the object (``repr``, ``==``, a copy,
``np.asarray``, a pickle round trip). A child that dies is a failure, and the
payload that killed it is named.
"""

from __future__ import annotations

import base64
import builtins
import collections
import contextlib
import datetime
import decimal
import fractions
import itertools
import json
import os
import pickle
import pickletools
import random
import subprocess
import sys
import textwrap
import types
import uuid
import zoneinfo

import numpy as np
import pandas as pd
import pytest
from dateutil.relativedelta import MO, relativedelta

from graphpickle import DATA_ONLY


def _every_named(prefix: str, suffix: str = "") -> list[object]:
    """An instance, made with its defaults, of each class DATA_ONLY names under
    ``prefix`` (every offset, every dtype) that this pandas defines."""
    made = []
    for name in sorted(DATA_ONLY):
        module, _, qualname = name.rpartition(".")
        if module == prefix and qualname.endswith(suffix):
            kind = getattr(pd if module == "pandas" else pd.offsets, qualname, None)
            with contextlib.suppress(TypeError, ValueError):  # (OBJECTS makes those that
                made.append(kind())  # need arguments with them)
    return made


# One or more objects of every type DATA_ONLY admits (test_every_admitted_type_is_covered
# says which names are reached only as others' aliases or as CPython's own types).
PARIS = zoneinfo.ZoneInfo("Europe/Paris")
try:
    TEMPLATES = [eval('t"a{1!r:>3}b{2.5}"')]  # (3.14's template strings)
except SyntaxError:
    TEMPLATES = []
OBJECTS = {
    "builtins": [complex(1, 2), range(0, 10, 3), slice(1, 2, 3), bytearray(b"ab"),
                 frozenset({1, 2}), {3, 4}, b"xy",
                 *[fd(a=1, b=(2, "x")) for fd in [getattr(builtins, "frozendict", None)] if fd],
                 *TEMPLATES],
    "collections": [collections.ChainMap({1: 2}, {3: 4}), collections.Counter("abca"),
                    collections.OrderedDict(a=1, b=2), collections.UserDict(a=1),
                    collections.UserList([1, 2]), collections.UserString("hi"),
                    collections.defaultdict(list, {1: [2]}), collections.deque([1, 2], maxlen=5)],
    "datetime": [datetime.date(2020, 2, 29), datetime.time(1, 2, 3, 4, tzinfo=datetime.UTC),
                 datetime.datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(
                     datetime.timedelta(hours=-3), "X")), datetime.tzinfo(),
                 datetime.timedelta(days=3, seconds=4, microseconds=5),
                 datetime.datetime(2020, 6, 1, tzinfo=PARIS)],
    "numbers and identifiers": [decimal.Decimal("1.25e-3"), decimal.Decimal("-Inf"),
                                fractions.Fraction(3, 7), uuid.UUID(int=12345)],
    "dateutil": [relativedelta(months=2, weekday=MO(-1))],
    "numpy dtypes": [np.dtype([("a", "<i4"), ("b", "<f8", (2,)), ("c", "O")]), np.dtype("M8[ns]"),
                     np.dtype(("i4", (2, 3))), np.dtype(">U5"), np.dtype("V8")],
    "numpy scalars": [np.float64(1.5), np.int8(-3), np.datetime64("2020-01-01", "D"),
                      np.timedelta64(5, "s"), np.str_("abc"), np.void(b"abcd")],
    "numpy array": np.arange(12, dtype="i4").reshape(3, 4),
    "numpy structured array": np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
    "numpy object array": np.array([1, "a", None, (1, 2)], dtype=object),
    "numpy datetime array": np.array(["2020-01-01", "NaT"], dtype="M8[s]"),
    "numpy Fortran array": np.asfortranarray(np.arange(6, dtype="f4").reshape(2, 3)),
    "Series": pd.Series([1.5, None, 3.0], index=["a", "b", "c"], name="s"),
    "Index": pd.Index(["a", "b", None]),
    "CategoricalIndex": pd.CategoricalIndex(["a", "b", "a"]),
    "DatetimeIndex": pd.date_range("2020-01-01", periods=4, freq="D", tz="Europe/Paris"),
    "IntervalIndex": pd.interval_range(0, 5),
    "MultiIndex": pd.MultiIndex.from_product([["a", "b"], [1, 2, 3]], names=["x", "y"]),
    "PeriodIndex": pd.period_range("2020-01", periods=3, freq="M"),
    "RangeIndex": pd.RangeIndex(2, 20, 3, name="r"),
    "TimedeltaIndex": pd.timedelta_range("1 day", periods=3),
    "scalars": [pd.Interval(0, 1, closed="left"), pd.Period("2020Q1"), pd.NaT, pd.NA,
                pd.Timestamp("2020-01-01 05:00", tz="UTC"), pd.Timedelta("1 days 2 ns")],
    "dtypes": [*_every_named("pandas", "Dtype"), pd.CategoricalDtype(["a", "b"], ordered=True),
               pd.DatetimeTZDtype("ns", "UTC"), pd.IntervalDtype("int64", "right"),
               pd.PeriodDtype("D"), pd.SparseDtype("float", np.nan)],
    "offsets": [*_every_named("pandas._libs.tslibs.offsets"), pd.DateOffset(months=2, weekday=0),
                pd.offsets.CustomBusinessDay(holidays=["2020-01-01"], weekmask="Mon Tue Wed"),
                pd.offsets.BusinessHour(start="09:00", end="17:00")],
    "Categorical": pd.Categorical(np.arange(300) % 200),  # int16 codes
    "Categorical of strings": pd.Categorical(["a", "b", "a", "c"]),
    "IntegerArray": pd.array([1, None, 3, 4], dtype="Int64"),
    "FloatingArray": pd.array([1.5, None], dtype="Float32"),
    "BooleanArray": pd.array([True, None, False], dtype="boolean"),
    "SparseArray": pd.arrays.SparseArray([0, 0, 1, 2, 0, 3]),
    "SparseArray of blocks": pd.arrays.SparseArray([0, 1, 1, 0, 0, 2, 2], kind="block"),
    "DatetimeArray": pd.array(pd.to_datetime(["2020-01-01", None]).tz_localize("UTC")),
    "TimedeltaArray": pd.array(pd.to_timedelta(["1s", None])),
    "PeriodArray": pd.array(pd.period_range("2020", periods=3, freq="Y")),
    "IntervalArray": pd.arrays.IntervalArray.from_breaks([0, 1, 3, 6]),
    "NumpyExtensionArray": pd.arrays.NumpyExtensionArray(np.array([1, 2, 3])),
    "StringArray": pd.array(["a", None, "c"], dtype="string"),
    "DataFrame of them": pd.DataFrame(
        {
            "c": pd.Categorical(["x", "y", "x"]),
            "i": pd.array([1, None, 3], dtype="Int64"),
            "s": pd.arrays.SparseArray([0, 1, 0]),
            "t": pd.date_range("2020", periods=3, tz="UTC"),
            "o": ["a", None, "b"],
        },
        index=pd.Index([5, 6, 7], name="k"),
    ),
    "DataFrame with a MultiIndex": pd.DataFrame(
        np.arange(12).reshape(4, 3),
        index=pd.MultiIndex.from_product([["a", "b"], [1, 2]]),
        columns=pd.period_range("2020", periods=3, freq="D"),
    ),
}  # fmt: skip
if hasattr(np.dtypes, "StringDType"):  # numpy 2
    OBJECTS["numpy StringDType array"] = np.array(["a", "bcd"], dtype=np.dtypes.StringDType())
try:  # pandas 2 turns zone names into pytz zones
    import pytz
except ImportError:
    pass
else:
    OBJECTS["pytz"] = [
        datetime.datetime(2020, 1, 1, tzinfo=pytz.utc),
        pytz.FixedOffset(90).localize(datetime.datetime(2020, 1, 1)),
        pytz.timezone("Europe/Paris").localize(datetime.datetime(2020, 6, 1)),
    ]

# Names that no payload above reaches, and why their types need no test here.
# CPython's own types are built by opcodes or by constructors that check their
# arguments; pandas 2's and numpy 1's names are aliases of the classes above
# (the corpus in test_data_only.py loads pickles that name them).
NOT_REACHED = {
    "builtins.bool", "builtins.bytes", "builtins.dict", "builtins.float", "builtins.int",
    "builtins.object", "builtins.str", "builtins.tuple", "operator.itemgetter",
}  # fmt: skip

CHILD = textwrap.dedent(
    """
    import base64, copy, faulthandler, json, pickle, sys
    import numpy as np
    import graphpickle
    faulthandler.enable()
    outcomes = []
    for line in sys.stdin:
        data = base64.b64decode(line)
        print(json.dumps({"trying": line.strip()}), file=sys.stderr, flush=True)
        try:
            obj = graphpickle.loads(data, allowed=graphpickle.DATA_ONLY)
        except Exception:
            outcomes.append("refused")
            continue
        for use in (repr, str, lambda o: o == o, hash, copy.copy, copy.deepcopy, np.asarray,
                    lambda o: pickle.loads(pickle.dumps(o))):
            try:
                use(obj)
            except Exception:
                pass
        outcomes.append("loaded")
    print(json.dumps(outcomes))
    """
)


def _arrays_in(obj: object) -> list[np.ndarray]:
    """The numpy arrays an object keeps its codes, positions, masks and values in."""
    found = []
    for attribute in ("_codes", "_data", "_mask", "sp_values", "_ndarray"):
        value = getattr(obj, attribute, None)
        if isinstance(value, np.ndarray):
            found.append(value)
    index = getattr(obj, "sp_index", None)
    if index is not None:
        found.append(index.to_int_index().indices)
    if isinstance(obj, pd.DataFrame):
        for column in obj:
            found.extend(_arrays_in(obj[column].array))
    if isinstance(obj, np.ndarray):
        found.append(obj)
    return found


def _regions(payload: bytes, obj: object) -> list[range]:
    """Where the payload states something: those arrays' bytes (written in
    band), and every opcode's argument (a count, a length, a code, a flag, a
    string naming a unit or a zone)."""
    regions = []
    for array in _arrays_in(obj):
        raw = np.ascontiguousarray(array).tobytes()
        at = payload.find(raw) if raw else -1
        if at >= 0:
            regions.append(range(at, at + len(raw)))
    ops = [position for _, _, position in pickletools.genops(payload)] + [len(payload)]
    regions.extend(range(a + 1, b) for a, b in itertools.pairwise(ops) if b - a > 1)
    return regions


def _mutations(data: bytes, draws: list[tuple[int, bytes]]) -> list[bytes]:
    return [data[:at] + new + data[at + len(new) :] for at, new in draws]


def _run_child(payloads: list[bytes], seed: str = "") -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input="\n".join(base64.b64encode(p).decode() for p in payloads) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        tried = [
            json.loads(line)["trying"] for line in done.stderr.splitlines() if line.startswith("{")
        ]
        culprit = tried[-1] if tried else "?"
        pytest.fail(
            f"the child died ({done.returncode}) on the payload {culprit} ({seed}):\n"
            f"{done.stderr[-1500:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


# An integer of each width that points far outside (a code, a position, a length).
_FAR = [b"\x7f", b"\xff", b"\x80", b"\xff\x7f", b"\x00\x80", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80",
        b"\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x00", b"\x01", b"\x02", b"\x10"]  # fmt: skip


@pytest.mark.parametrize("protocol", [2, 5])
@pytest.mark.parametrize("name", list(OBJECTS))
def test_changed_states_are_refused_or_safe_to_use(name, protocol):
    payload = pickle.dumps(OBJECTS[name], protocol)
    regions = _regions(payload, OBJECTS[name])
    # Most changes where the payload states something, some anywhere, drawn
    # uniformly from a new seed each run (GRAPHPICKLE_FUZZ_SEED repeats one;
    # hypothesis' first examples are its simplest, which change little).
    seed = int(os.environ.get("GRAPHPICKLE_FUZZ_SEED") or random.randrange(2**32))
    rng = random.Random(f"{seed} {name} {protocol}")
    draws = []
    for _ in range(120):
        if rng.random() < 0.85:
            at = rng.choice(rng.choice(regions))
        else:
            at = rng.randrange(2, len(payload) - 2)
        draws.append((at, rng.choice(_FAR)))
    outcomes = _run_child(_mutations(payload, draws), f"GRAPHPICKLE_FUZZ_SEED={seed}")
    assert len(outcomes) == len(draws)
    assert "loaded" in outcomes or "refused" in outcomes


def test_every_admitted_type_is_covered(monkeypatch):
    """Each object DATA_ONLY names (by identity: pandas 2's and numpy 1's names
    are aliases) is reached by a payload above, or is in NOT_REACHED."""
    import graphpickle
    from graphpickle.restricted import unpickler

    reached: set[str] = set()
    find_class = unpickler._RestrictedUnpickler.find_class

    def spy(self, module, name):
        if self.proto < 3:
            module, name = unpickler.imported_name(module, name)
        reached.add(f"{module}.{name}")
        return find_class(self, module, name)

    monkeypatch.setattr(unpickler._RestrictedUnpickler, "find_class", spy)
    for group in OBJECTS.values():
        for obj in group if isinstance(group, list) else [group]:
            for protocol in (0, 1, 2, 5):
                try:
                    payload = pickle.dumps(obj, protocol)
                except TypeError:  # (some objects cannot be pickled below protocol 2)
                    continue
                graphpickle.loads(payload, allowed=DATA_ONLY)
    reached_objects = {_identity(_resolve(name)) for name in reached}
    missing = sorted(
        name
        for name in DATA_ONLY - NOT_REACHED
        if (obj := _resolve(name)) is not None and _identity(obj) not in reached_objects
    )
    assert not missing, f"no payload reaches these admitted names: {missing}"


def _identity(obj: object) -> object:
    """An object's identity (a class's bound method is made anew on each lookup)."""
    if isinstance(obj, types.MethodType | types.BuiltinMethodType) and not isinstance(
        obj.__self__, types.ModuleType
    ):
        return (id(obj.__self__), obj.__name__)
    return id(obj)


def _resolve(name: str) -> object:
    """What ``name`` is in this environment, or None where it is not defined."""
    import importlib
    import warnings

    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            with warnings.catch_warnings():  # (numpy 2 warns of numpy.core's names)
                warnings.simplefilter("ignore")
                obj: object = importlib.import_module(".".join(parts[:split]))
                for part in parts[split:]:
                    obj = getattr(obj, part, None)
        except ImportError:
            continue
        return obj
    return None


def test_out_of_range_codes_are_refused():
    import graphpickle
    from graphpickle import DATA_ONLY, ForbiddenGlobalError

    frame = pd.DataFrame({"c": pd.Categorical([10, 20, 10])})
    payload = pickle.dumps(frame, 5)
    at = payload.find(b"\x00\x01\x00")
    bad = payload[:at] + b"\x00\x7f\x00" + payload[at + 3 :]
    with pytest.raises(ForbiddenGlobalError, match="codes past its categories"):
        graphpickle.loads(bad, allowed=DATA_ONLY)
    assert graphpickle.loads(payload, allowed=DATA_ONLY).equals(frame)
