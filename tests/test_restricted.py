"""Restricted loading: only allow-listed globals are imported."""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import io
import os
import pickle
import uuid

import numpy as np
import pandas as pd
import pytest

import graphpickle
from graphpickle import DATA_ONLY


class RunsCommand:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


DATA = {
    "containers": [{1, 2}, frozenset({3}), bytearray(b"ab"), complex(1, 2), range(3), slice(1, 5)],
    "collections": [
        collections.OrderedDict(a=1),
        collections.Counter("abca"),
        collections.defaultdict(list, {"k": [1]}),
        collections.deque([1, 2]),
    ],
    "time": [
        datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.UTC),
        datetime.date(2026, 1, 1),
        datetime.timedelta(hours=3),
    ],
    "numbers": [decimal.Decimal("1.5"), fractions.Fraction(1, 3), uuid.UUID(int=7)],
    "numpy": [
        np.arange(6).reshape(2, 3),
        np.float32(1.5),
        np.dtype("M8[s]"),
        np.datetime64("2026"),
    ],
    "pandas": [
        pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}, index=pd.Index([3, 4], name="i")),
        pd.Series([1.5, 2.5], name="s", index=pd.date_range("2026-01-01", periods=2)),
        pd.Categorical(["a", "b", "a"]),
        pd.Timestamp("2026-01-01", tz="UTC"),
        pd.Timedelta("1D"),
        pd.MultiIndex.from_tuples([(1, "a"), (2, "b")]),
    ],
}


def _equal(a, b) -> bool:
    if isinstance(a, pd.DataFrame | pd.Series | pd.Index):
        return a.equals(b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, pd.Categorical):
        return list(a) == list(b)
    return a == b


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("group", list(DATA))
def test_data_only_loads_plain_data(group, protocol):
    values = DATA[group]
    loaded = graphpickle.loads(graphpickle.dumps(values, protocol), allowed=DATA_ONLY)
    assert all(_equal(a, b) for a, b in zip(values, loaded, strict=True))


def test_out_of_band_buffers_under_restriction():
    arrays = [np.arange(10), np.ones((3, 3))]
    buffers: list[pickle.PickleBuffer] = []
    data = graphpickle.dumps(arrays, buffer_callback=buffers.append)
    loaded = graphpickle.loads(data, buffers=buffers, allowed=DATA_ONLY)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, loaded, strict=True))


def test_command_is_refused_before_import():
    data = pickle.dumps(RunsCommand())
    with pytest.raises(graphpickle.ForbiddenGlobalError) as info:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert info.value.name == f"{os.system.__module__}.system"
    assert "not in the allow-list" in str(info.value)
    assert isinstance(info.value, graphpickle.UnpicklingError)


def test_by_value_functions_are_refused_as_code():
    data = graphpickle.dumps({"f": lambda: 1})
    with pytest.raises(graphpickle.ForbiddenGlobalError, match="pickled by value, which is code"):
        graphpickle.loads(data, allowed=DATA_ONLY)


def test_allow_list_forms():
    data = graphpickle.dumps([collections.OrderedDict(a=1), datetime.date(2026, 1, 1)])
    assert graphpickle.loads(data, allowed={"collections.OrderedDict", "datetime.date"})
    assert graphpickle.loads(data, allowed={"collections", "datetime"})  # whole modules
    assert graphpickle.loads(data, allowed={"collections.*", "datetime.*"})  # packages
    with pytest.raises(graphpickle.ForbiddenGlobalError, match=r"datetime\.date"):
        graphpickle.loads(data, allowed={"collections"})
    with pytest.raises(TypeError, match="collection of names"):
        graphpickle.loads(data, allowed="collections")
    extended = DATA_ONLY | {"test_restricted.*"}
    assert graphpickle.loads(graphpickle.dumps(Point(1, 2)), allowed=extended) == Point(1, 2)


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)


def test_load_from_stream_leaves_the_rest():
    stream = io.BytesIO(graphpickle.dumps([1]) + graphpickle.dumps({2}))
    assert graphpickle.load(stream, allowed=DATA_ONLY) == [1]
    assert graphpickle.load(stream, allowed=DATA_ONLY) == {2}


def test_static_scan_and_restricted_loading_agree():
    # inspect() lists exactly the globals that loading imports: allowing exactly
    # that list loads the payload, and leaving out any one is refused by name.
    payloads = [
        graphpickle.dumps(DATA),
        graphpickle.dumps({"f": lambda x: x, "p": Point(1, 2)}),
        pickle.dumps(DATA, protocol=2),
    ]
    for data in payloads:
        names = set(graphpickle.inspect(data).globals)
        graphpickle.loads(data, allowed=names)
        for missing in names:
            with pytest.raises(graphpickle.ForbiddenGlobalError) as info:
                graphpickle.loads(data, allowed=names - {missing})
            assert info.value.name == missing


def _stack_global(module: str, name: str) -> bytes:
    return (
        b"\x8c" + bytes([len(module)]) + module.encode()
        + b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93"
    )  # fmt: skip


def test_dotted_names_need_an_exact_entry():
    # Protocol 4 resolves "datetime.__builtins__.get" attribute by attribute: a
    # whole-module entry must not reach the builtins (eval, open...) through it.
    escape = b"\x80\x04" + _stack_global("datetime", "__builtins__.get") + b"."
    with pytest.raises(graphpickle.ForbiddenGlobalError, match="__builtins__"):
        graphpickle.loads(escape, allowed=DATA_ONLY)
    with pytest.raises(graphpickle.ForbiddenGlobalError):
        graphpickle.loads(escape, allowed={"datetime.*"})
    nested = b"\x80\x04" + _stack_global("collections", "OrderedDict.fromkeys") + b"."
    with pytest.raises(graphpickle.ForbiddenGlobalError):
        graphpickle.loads(nested, allowed={"collections"})
    allowed = {"collections.OrderedDict.fromkeys"}
    assert graphpickle.loads(nested, allowed=allowed) == collections.OrderedDict.fromkeys


def test_python2_names_are_checked_once_mapped():
    import dbm

    data = b"\x80\x02canydbm\nopen\nq\x00."  # Python 2's anydbm is Python 3's dbm
    assert graphpickle.loads(data, allowed={"dbm.open"}) is dbm.open
    with pytest.raises(graphpickle.ForbiddenGlobalError, match=r"dbm\.open"):
        graphpickle.loads(data, allowed={"anydbm.open"})


def _getattr_of(module: str, name: str, attr: str) -> bytes:
    return (
        b"\x80\x04" + _stack_global("builtins", "getattr") + _stack_global(module, name)
        + b"\x8c" + bytes([len(attr)]) + attr.encode() + b"\x86R."
    )  # fmt: skip


def test_getattr_is_a_dotted_global_the_list_must_name():
    # How CPython pickles ZoneInfo: getattr(zoneinfo.ZoneInfo, "_unpickle").
    import zoneinfo

    assert graphpickle.loads(
        _getattr_of("zoneinfo", "ZoneInfo", "_unpickle"), allowed=DATA_ONLY
    ) == (zoneinfo.ZoneInfo._unpickle)
    with pytest.raises(graphpickle.ForbiddenGlobalError) as info:
        graphpickle.loads(_getattr_of("fractions", "Fraction", "from_float"), allowed=DATA_ONLY)
    assert info.value.name == "fractions.Fraction.from_float"
    # getattr of anything but a resolved global (here a str the payload made).
    made = b"\x80\x04" + _stack_global("builtins", "getattr") + b"\x8c\x01x\x8c\x05upper\x86R."
    with pytest.raises(graphpickle.ForbiddenGlobalError, match="only as a global's attribute"):
        graphpickle.loads(made, allowed=DATA_ONLY)


def test_pandas_never_opens_a_dateutil_path():
    # DatetimeTZDtype("ns", "dateutil//etc/passwd") would make dateutil read the file.
    call = (
        b"\x80\x04" + _stack_global("pandas", "DatetimeTZDtype")
        + b"\x8c\x02ns\x8c\x14dateutil//etc/passwd\x86R."
    )  # fmt: skip
    with pytest.raises(graphpickle.ForbiddenGlobalError, match="dateutil zone named by a string"):
        graphpickle.loads(call, allowed=DATA_ONLY)
    index = pd.DatetimeIndex(["2026-01-01"], tz="Europe/Paris")
    assert graphpickle.loads(pickle.dumps(index), allowed=DATA_ONLY).equals(index)


# Payloads from the security review that crashed the interpreter or opened a
# file under DATA_ONLY, each refused now. They run in a child process: were a
# check to regress, the child would crash, not the test run.
_REVIEW_CASES = r"""
import pickle, struct, sys
import numpy as np, pandas as pd
from pandas._libs.internals import _unpickle_block
from pandas.core.internals.managers import BlockManager
import graphpickle

def g(m, n): return b"c" + m.encode() + b"\n" + n.encode() + b"\n"
def s(x): x = x.encode(); return b"X" + struct.pack("<I", len(x)) + x
def i(n): return b"J" + struct.pack("<i", n)
def raw(b): return b"C" + bytes([len(b)]) + b
N, T, F = b"N", b"\x88", b"\x89"
core = "numpy._core.multiarray" if np.__version__ >= "2" else "numpy.core.multiarray"
def array(dtype, data):
    return (g(core, "_reconstruct") + g("numpy", "ndarray") + b"(" + i(0) + b"t" + raw(b"b") + b"\x87R"
            + b"(" + i(1) + b"(" + i(1) + b"t" + dtype + F + raw(data) + b"tb")
# A fresh object dtype told by BUILD that it holds no objects: 8 bytes become a pointer.
no_objects = g("numpy", "dtype") + s("O8") + F + T + b"\x87R(" + i(3) + s("|") + N + N + N + i(-1) + i(-1) + i(0) + b"tb"
# A structured dtype whose field lies 1 TiB past its 8-byte item.
far_field = (g("numpy", "dtype") + s("V8") + F + T + b"\x87R(" + i(3) + s("|") + N + b"(" + s("a") + b"t}"
             + s("a") + g("numpy", "dtype") + s("f8") + F + F + b"\x87R" + b"\x8a\x06" + (1 << 40).to_bytes(6, "little")
             + b"\x86s" + i(8) + i(1) + i(0) + b"tb")

class Call:
    def __init__(self, f, a): self.f, self.a = f, a
    def __reduce__(self): return (self.f, self.a)

far = 10**8
block = Call(_unpickle_block, (np.zeros((1, 2)), slice(far, far + 1, 1), 2))
manager = Call(BlockManager, ((block,), [pd.Index(["a"]), pd.RangeIndex(2)]))
cases = {
    "dtype flags": b"\x80\x03" + g("builtins", "list") + array(no_objects, struct.pack("<Q", 0x4141414141414140)) + b"\x85R.",
    "dtype field offset": b"\x80\x03" + g("pandas", "DataFrame") + array(far_field, bytes(8)) + b"\x85R.",
    "block placement": pickle.dumps(Call(pd.Index, (Call(pd.DataFrame, (manager,)),)), 2),
    "uninitialised MultiIndex": b"\x80\x02" + g("builtins", "list") + g("copyreg", "_reconstructor") + g("pandas", "MultiIndex") + g("builtins", "object") + b"N\x87R\x85R.",
    "dateutil path in a dtype string": b"\x80\x02" + g("pandas", "DatetimeTZDtype") + s("datetime64[ns, dateutil//etc/passwd]") + b"\x85R.",
    "Fraction exponent": b"\x80\x02" + g("fractions", "Fraction") + s("1e30000000") + b"\x85R.",
    "exponential repr": b"\x80\x04" + g("operator", "itemgetter") + b"\x8c\x01a\x85q\x000" + b"".join(b"h%ch%c\x86q%c0" % (k, k, k + 1) for k in range(59)) + b"h;h;\x86q<\x85R.",
}
opened = []
sys.addaudithook(lambda event, args: event == "open" and "passwd" in str(args[0]) and opened.append(args[0]))
for name, data in cases.items():
    try:
        graphpickle.loads(data, allowed=graphpickle.DATA_ONLY)
        print(name, "LOADED")
    except (graphpickle.ForbiddenGlobalError, graphpickle.BudgetExceededError):
        print(name, "refused")
print("opened", opened)
"""


def test_the_security_review_cases_are_refused():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _REVIEW_CASES], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == "opened []"
    assert [line.rsplit(" ", 1)[1] for line in lines[:-1]] == ["refused"] * 7, lines


def test_a_shared_immutable_call_result_fails_as_pickle_fails():
    # int() returns the cached 0, which something else holds: no opcode can
    # change an int, so APPEND on it fails with pickle's own error (chained to
    # restricted loading's UnpicklingError, which says where), and is not
    # reported as a forbidden change (inspect calls such a payload data, and
    # malformed: restricted loading stops on it).
    data = b"cbuiltins\nint\n(tRcbuiltins\nint\na."
    with pytest.raises(AttributeError):
        pickle.loads(data)
    with pytest.raises(graphpickle.UnpicklingError, match="stopped at APPEND, byte 31") as caught:
        graphpickle.loads(data, allowed=["builtins.int"])
    assert not isinstance(caught.value, graphpickle.ForbiddenGlobalError)
    assert isinstance(caught.value.__cause__, AttributeError)
    report = graphpickle.inspect(data)
    assert report.verdict == "data"
    assert "AttributeError" in str(report.error)


def test_a_dtype_given_a_state_of_another_shape_is_refused_not_a_crash():
    # Found by the wire's fuzz test: numpy's dtype __setstate__ reads the state by
    # position, and dtype("M8") given an int64 dtype's state (no unit), or an
    # int64 dtype given a state with a field missing, crashes the process. In a child.
    import subprocess
    import sys

    code = (
        "import graphpickle, numpy, pickle\n"
        "class D:\n"
        "    def __init__(self, kind, state):\n"
        "        self.kind, self.state = kind, state\n"
        "    def __reduce__(self):\n"
        "        return (numpy.dtype, (self.kind, False, True), self.state)\n"
        "for kind, state in [('M8', (3, '<', None, None, None, -1, -1, 0)),\n"
        "                    ('i8', (3, '<', None, None, -1, -1, 0))]:\n"
        "    try:\n"
        "        graphpickle.loads(pickle.dumps(D(kind, state), 5), allowed=graphpickle.DATA_ONLY)\n"
        "    except graphpickle.ForbiddenGlobalError as exc:\n"
        "        print('refused:', 'another shape' in str(exc))\n"
        "for dtype in [numpy.dtype('M8[ns]'), numpy.dtype([('a', 'i4'), ('b', ('f8', (2,)))]),\n"
        "              numpy.dtype('i8', metadata={'x': 1}), numpy.dtype('U3')]:\n"
        "    print(graphpickle.loads(graphpickle.dumps(dtype), allowed=graphpickle.DATA_ONLY) == dtype)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["refused:", "True"] * 2 + ["True"] * 4


def test_a_byte_that_is_no_opcode_is_refused_as_the_c_unpickler_words_it():
    for data in (b"\x00", b"\x80\x05\xff", b"z"):
        with pytest.raises(pickle.UnpicklingError) as c_error:
            pickle.loads(data)
        with pytest.raises(pickle.UnpicklingError) as restricted:
            graphpickle.loads(data, allowed=graphpickle.DATA_ONLY)
        assert str(restricted.value) == str(c_error.value)
