"""A BYTEARRAY8 that claims more bytes than the data holds is refused before the
C unpickler reads it (CPython 3.11-3.14 free a half-made bytearray with an
uninitialized export count when its allocation fails: a SystemError or a crash,
found by the wire's fuzz test in CI).
On 3.15, whose unpickler reads in pieces, the check is skipped (overrun.NEEDED)."""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle.core import overrun as _overrun
from graphpickle.core import pickler as _pickler


def _bytearray8(length: int) -> bytes:
    return b"\x96" + struct.pack("<Q", length)


OVERRUNS = {
    "alone": b"\x80\x05" + _bytearray8(2**62) + b"abc.",
    "in a frame": b"\x80\x05\x95" + struct.pack("<Q", 20) + b"]\x94(K\x01" + _bytearray8(2**60),
    "after other items": pickle.dumps([1, "x", b"y"], 5)[:-3] + _bytearray8(2**40) + b"e.",
    "one byte too long": b"\x80\x05" + _bytearray8(5) + b"abc.",
}

NOT_OVERRUNS = {
    # The opcode's byte inside data is no opcode: the walk skips it.
    "0x96 inside bytes": pickle.dumps(b"\x96" + b"\xff" * 8, 5),
    "0x96 inside a string": pickle.dumps("\x96\xff\xff\xff\xff\xff\xff\xff\xff", 0),
    "0x96 in a memo index": pickle.dumps([[i] for i in range(200)], 5),
    "an exact bytearray": pickle.dumps(bytearray(b"\x96" + b"\xff" * 8), 5),
    "after STOP": pickle.dumps(1, 5) + _bytearray8(2**62),
    "after an invalid opcode": b"\x80\x05\xff" + _bytearray8(2**62),
    "empty": b"",
    # Past sys.maxsize the unpickler raises OverflowError before it allocates.
    "longer than any size": b"\x80\x05" + _bytearray8(2**63) + b"abc.",
}

LOADERS = {
    "graphpickle.loads": graphpickle.loads,
    # (the same function when the C parts are off)
    "graphpickle.loads (Python)": getattr(graphpickle.loads, "__wrapped__", graphpickle.loads),
}


@pytest.mark.parametrize("case", OVERRUNS)
@pytest.mark.parametrize("loader", LOADERS)
def test_an_overlong_bytearray8_is_refused_as_truncated(case, loader):
    expected = "pickle data was truncated"  # the unpickler's own words for the end of data
    if not _overrun.NEEDED:  # (the unpickler is safe there: the test below)
        with pytest.raises(pickle.UnpicklingError) as plain:
            pickle.loads(OVERRUNS[case])
        expected = str(plain.value)  # 3.14+ check a frame's length first
    with pytest.raises(pickle.UnpicklingError) as raised:
        LOADERS[loader](OVERRUNS[case])
    assert str(raised.value) == expected


@pytest.mark.parametrize("case", OVERRUNS)
def test_both_checks_find_each_overrun(case):
    data = OVERRUNS[case]
    assert _overrun._bytearray8_overruns_in_python(data)
    assert _overrun.bytearray8_overruns(data)
    assert _overrun.bytearray8_overruns(memoryview(bytearray(data)))


@pytest.mark.parametrize("case", NOT_OVERRUNS)
def test_data_that_only_looks_like_one_passes(case):
    data = NOT_OVERRUNS[case]
    assert not _overrun._bytearray8_overruns_in_python(data)
    assert not _overrun.bytearray8_overruns(data)


@pytest.mark.parametrize(
    "data", ["a str", 3, memoryview(bytes(12))[::2], np.zeros((3, 4), order="F")]
)
def test_what_is_not_contiguous_bytes_is_no_overrun(data):
    # The unpickler raises its own error for those.
    assert _overrun.bytearray8_overruns(data) is False
    assert _overrun._bytearray8_overruns_in_python(data) is False


def test_the_check_runs_where_the_unpickler_needs_it():
    """Plain pickle.loads of each overrun, in a child allowed 1 GiB more than it
    has: where the unpickler refuses every one with an UnpicklingError, without
    crash, message or allocation (3.15), overrun.NEEDED must be false; anywhere
    else true (3.11-3.14 raise MemoryError for the declared lengths and print a
    SystemError for the half-made bytearray, or crash)."""
    code = (
        "import pickle, resource, sys\n"
        "size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, size + 2**30))\n"
        f"for data in {list(OVERRUNS.values())!r}:\n"
        "    try:\n"
        "        pickle.loads(data)\n"
        "        print('loaded')\n"
        "    except pickle.UnpicklingError as exc:\n"
        "        print('refused')\n"
        "    except BaseException as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    outcomes = done.stdout.splitlines()
    safe = done.returncode == 0 and not done.stderr and outcomes == ["refused"] * len(OVERRUNS)
    assert _overrun.NEEDED is not safe, (sys.version_info, done.returncode, outcomes, done.stderr)


def test_a_length_past_any_size_keeps_pickles_own_error():
    with pytest.raises(OverflowError, match="BYTEARRAY8 exceeds"):
        graphpickle.loads(NOT_OVERRUNS["longer than any size"])


def test_ordinary_pickles_still_load():
    value = {"b": bytearray(b"\x96" + b"\xff" * 8), "n": list(range(300))}
    assert graphpickle.loads(pickle.dumps(value, 5)) == value


def test_the_wire_and_inspect_refuse_it_too():
    with pytest.raises(pickle.UnpicklingError, match="truncated"):
        _pickler.load_bytes(OVERRUNS["alone"], None, None)
    report = graphpickle.inspect(OVERRUNS["in a frame"])
    assert report.error is not None


def _pickles():
    leaves = st.one_of(
        st.integers(), st.binary(max_size=40), st.text(max_size=10), st.floats(),
        st.binary(max_size=12).map(bytearray), st.none(),
    )  # fmt: skip
    values = st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner), max_leaves=12
    )
    return st.builds(pickle.dumps, values, st.integers(0, 5))


@settings(max_examples=600, deadline=None)
@given(
    data=_pickles(),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 12),
    splice=st.none() | st.tuples(st.integers(0, 10_000), st.integers(0, 2**64 - 1)),
)
def test_c_and_python_give_the_same_answer(data, edits, cut, splice):
    mutated = bytearray(data)
    if splice is not None:  # a BYTEARRAY8 opcode (or its byte in data) somewhere
        position, length = splice
        mutated[position % (len(mutated) + 1) : 0] = _bytearray8(length)
    for position, value in edits:
        if mutated:
            mutated[position % len(mutated)] = value
    sample = bytes(mutated[: max(0, len(mutated) - cut)])
    assert _overrun.bytearray8_overruns(sample) == _overrun._bytearray8_overruns_in_python(sample)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="a Python __buffer__ is 3.12's")
def test_an_exporter_that_changes_its_bytes_is_read_once():
    """The overrun check and the unpickler read one view: an object whose
    __buffer__ shows the check harmless bytes and then an overrun is refused
    (in a child: the C unpickler could crash on it)."""
    code = (
        "import graphpickle, pickle\n"
        f"bad = {OVERRUNS['alone']!r}\n"
        "class Shifty:\n"
        "    calls = 0\n"
        "    def __buffer__(self, flags):\n"
        "        Shifty.calls += 1\n"
        "        return memoryview(pickle.dumps(1, 5) if Shifty.calls == 1 else bad)\n"
        "try:\n"
        "    print(graphpickle.loads(Shifty()))\n"
        "except pickle.UnpicklingError as exc:\n"
        "    print('refused', exc)\n"
        "print('calls', Shifty.calls)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.splitlines()[-1] == "calls 1", done.stdout
