"""Resource attacks: each ends in a clear exception, within 10 s of CPU and
256 MB above the child's baseline, on restricted loading, ``inspect`` and the
wire (restricted/budgets.py, dry_load, the wire's frame checks and
wire.MAX_DECOMPRESSED); states that crash plain pickle's process later are
refused (data_checks.py).

The attacks are benchmarks/resource_attacks.py's (the security benchmark
counts them too). Each runs in a child interpreter under RLIMIT_AS and
RLIMIT_CPU: one that got past its budget is killed (or raises MemoryError)
there, and the test says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from resource_attacks import CRASHERS, RESOURCE, WIRE, try_one

RESOURCE_LIMITS = "within 10 s of CPU and 256 MB above the child's baseline"


@pytest.mark.parametrize("name", list(RESOURCE))
@pytest.mark.parametrize("mode", ["restricted", "file", "inspect"])
def test_a_resource_attack_ends_in_a_clear_exception(mode, name):
    result = try_one(mode, name)
    outcome = str(result["outcome"])
    # (refused before the work or the allocation: not a MemoryError met on the way)
    assert "MemoryError" not in outcome, outcome
    if mode == "restricted":
        assert outcome.startswith("refused: "), outcome
    elif mode == "file":  # (the pure-Python memo is a dict: an index costs nothing)
        assert outcome.startswith(("refused: ", "loaded")), outcome
    else:  # a report that does not pass as clean data, in budget
        assert outcome.startswith(("verdict: ", "refused: ")), outcome
        assert outcome != "verdict: data", outcome
    assert result["cpu"] is not None and result["cpu"] < 10, RESOURCE_LIMITS


@pytest.mark.parametrize("name", [*WIRE, "a shared list copied by 200,000 calls"])
def test_the_wire_refuses_what_a_message_states(name):
    outcome = str(try_one("wire", name)["outcome"])
    assert outcome.startswith("refused: "), outcome
    assert "MemoryError" not in outcome, outcome  # (a limit met, not a budget)
    if "honestly" in name or "frames" in name:  # each frame holds what it says: the cap refuses
        assert outcome.startswith("refused: BudgetExceededError"), outcome


@pytest.mark.parametrize("name", list(CRASHERS))
def test_a_state_that_crashes_plain_pickle_later_is_refused(name):
    restricted = str(try_one("restricted", name)["outcome"])
    if restricted.startswith("not applicable"):
        pytest.skip(restricted)
    assert restricted.startswith("refused: ForbiddenGlobalError"), restricted
    assert try_one("inspect", name)["outcome"] == "verdict: code"
    control = try_one("control", name)
    if control["outcome"] == "loaded":  # (an older pandas reads it without crashing)
        pytest.skip("plain pickle does not crash on it with this numpy and pandas")
    assert str(control["outcome"]).startswith("died: "), f"the sample is broken: {control}"


def test_a_budget_error_names_the_budget_the_opcode_and_where():
    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError

    data = b"\x80\x05\x96" + (2**40).to_bytes(8, "little") + b"."
    with pytest.raises(BudgetExceededError) as caught:
        graphpickle.loads(data, allowed=DATA_ONLY)
    error = caught.value
    assert (error.budget, error.opcode, error.offset) == ("input", "BYTEARRAY8", 2)
    assert "BYTEARRAY8 at byte 2" in str(error) and "'input'" in str(error)


def test_deep_data_within_the_budget_still_loads():
    import collections
    import pickle

    import graphpickle
    from graphpickle import DATA_ONLY

    nested: list = []
    for _ in range(150):  # about what the C pickler writes under its default recursion limit
        nested = [collections.OrderedDict(a=collections.deque([nested]))]
    loaded = graphpickle.loads(pickle.dumps(nested, 5), allowed=DATA_ONLY)
    depth = 0
    while loaded:
        loaded = loaded[0]["a"][0]
        depth += 1
    assert depth == 150


def test_shared_tuples_within_the_budget_still_load():
    import pickle

    import graphpickle
    from graphpickle import DATA_ONLY

    t: tuple = ()
    for _ in range(15):  # 2**16 items visited: well within the budget
        t = (t, t)
    assert graphpickle.loads(pickle.dumps({t: 1}, 5), allowed=DATA_ONLY) == {t: 1}


def test_the_wire_caps_what_a_message_decompresses_to(monkeypatch):
    import numpy as np

    import graphpickle.wire as wire
    from graphpickle import BudgetExceededError

    frames = wire.pack(np.zeros(2**22), compression="zstd")  # 32 MiB of zeros, a few KiB sent
    assert sum(memoryview(f).nbytes for f in frames) < 2**20
    assert wire.unpack(frames).nbytes == 2**25
    with pytest.raises(BudgetExceededError, match="decompresses to"):
        wire.unpack(frames, max_bytes=2**24)
    message = wire.pack_bytes(np.zeros(2**22), compression="zstd")
    with pytest.raises(BudgetExceededError, match="decompresses to"):
        wire.unpack_bytes(message, max_bytes=2**24)
    monkeypatch.setattr(wire, "MAX_DECOMPRESSED", 2**24)
    with pytest.raises(BudgetExceededError, match="decompresses to"):
        wire.unpack(frames)
    import io

    stream = io.BytesIO()
    wire.write(stream, np.zeros(2**22), compression="zstd")
    for cap, fails in ((2**26, False), (2**24, True)):
        stream.seek(0)
        monkeypatch.setattr(wire, "MAX_DECOMPRESSED", 2**32)
        if fails:
            with pytest.raises(BudgetExceededError):
                wire.read(stream, max_bytes=cap)
        else:
            assert wire.read(stream, max_bytes=cap).nbytes == 2**25


def test_numbers_within_the_digits_budget_still_load_and_the_budget_is_read_at_each_load(
    monkeypatch,
):
    import decimal
    import fractions
    import pickle

    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError
    from graphpickle.restricted import budgets

    honest = [
        decimal.Decimal("1e4000"),
        decimal.Decimal("-1e-4000"),
        decimal.Decimal("-Infinity"),
        fractions.Fraction(10**4000, 3),
        {2**10_000: (1, 2)},  # a big int as data (not converted) is fine
    ]
    for protocol in (2, 5):
        data = pickle.dumps(honest, protocol)
        assert graphpickle.loads(data, allowed=DATA_ONLY) == honest
    # a Decimal past the budget is held (making it is cheap); converting it is not
    assert graphpickle.loads(pickle.dumps(decimal.Decimal("1e5000"), 5), allowed=DATA_ONLY) == (
        decimal.Decimal("1e5000")
    )
    int_class, decimal_class = (
        b"\x8c\x08builtins\x8c\x03int\x93",
        b"\x8c\x07decimal\x8c\x07Decimal\x93",
    )
    made = decimal_class + b"\x8c\x061e5000\x85R"  # Decimal("1e5000")
    data = b"\x80\x04" + int_class + made + b"\x85R."  # int(Decimal("1e5000"))
    with pytest.raises(BudgetExceededError, match="digits") as caught:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert caught.value.budget == "digits" and caught.value.opcode == "REDUCE"
    monkeypatch.setattr(budgets, "MAX_DIGITS", 6000)
    assert graphpickle.loads(data, allowed=DATA_ONLY) == 10**5000
    monkeypatch.undo()
    # every call that converts one is checked: NEWOBJ and OBJ as REDUCE
    calls = {
        "NEWOBJ": b"\x80\x04" + int_class + made + b"\x85\x81.",
        "OBJ": b"\x80\x04(" + int_class + made + b"o.",
    }
    for opcode, data in calls.items():
        with pytest.raises(BudgetExceededError) as caught:
            graphpickle.loads(data, allowed=DATA_ONLY)
        assert (caught.value.budget, caught.value.opcode) == ("digits", opcode)


def test_str_bytes_and_bytearray_take_text_and_builtin_encodings_only():
    import subprocess
    import textwrap

    child = textwrap.dedent(
        """
        import pickle, sys
        import graphpickle
        from graphpickle import DATA_ONLY, ForbiddenGlobalError

        for data in (
            b"\\x80\\x04cbuiltins\\nbytes\\n\\x8c\\x01x\\x8c\\x02uu\\x86R.",
            b"\\x80\\x04cbuiltins\\nstr\\n]\\x85R.",
        ):
            try:
                graphpickle.loads(data, allowed=DATA_ONLY)
            except ForbiddenGlobalError as exc:
                print("refused:", exc)
            else:
                print("loaded")
        print("imported:", "encodings.uu_codec" in sys.modules)
        print(graphpickle.loads(pickle.dumps(bytearray(b"ab\\xff"), 2), allowed=DATA_ONLY))
        """
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused:") and "encoding named 'uu'" in lines[0], lines
    assert lines[1].startswith("refused:") and "str of a list" in lines[1], lines
    assert lines[2:] == ["imported: False", "bytearray(b'ab\\xff')"], lines


def test_tuple_keys_within_the_hashing_budget_still_load(monkeypatch):
    import pickle

    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError
    from graphpickle.restricted import budgets

    shared: tuple = ()
    for _ in range(10):  # 2**11 items' work, shared by every key
        shared = (shared, shared)
    graph = {("x", i, shared): i for i in range(2_000)}  # 4 million items hashed in all
    data = pickle.dumps(graph, 5)
    assert len(data) < 40_000
    assert graphpickle.loads(data, allowed=DATA_ONLY) == graph
    monkeypatch.setattr(budgets, "HASHING_FLOOR", 1 << 20)
    with pytest.raises(BudgetExceededError) as caught:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert caught.value.budget == "hashing" and caught.value.opcode == "SETITEMS"
    assert f"at byte {caught.value.offset}" in str(caught.value)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_honest_compressed_messages_load_under_the_default_caps(monkeypatch, codec):
    import numpy as np

    import graphpickle.wire as wire
    from graphpickle import BudgetExceededError

    pytest.importorskip("zstandard" if codec == "zstd" else "lz4")
    rng = np.random.default_rng(0)
    honest = [
        rng.random(2**17),
        np.arange(2**17),
        rng.integers(0, 100, 2**17),
        np.where(rng.random(2**21) < 0.01, 1.0, 0.0),  # 16 MiB, 1% nonzero: ~100-200x
        np.zeros(6 * 2**20),  # 48 MiB of zeros: within the floor
    ]
    for array in honest:
        message = wire.pack_bytes(array, compression=codec)
        assert np.array_equal(wire.unpack_bytes(message), array)
    zeros = np.zeros(12 * 2**20)  # 96 MiB of zeros, a few KiB sent: past 64 MiB + 64x
    message = wire.pack_bytes(zeros, compression=codec)
    assert len(message) < 2**20
    with pytest.raises(BudgetExceededError, match="64 x the") as caught:
        wire.unpack_bytes(message)
    assert caught.value.budget == "decompressed" and caught.value.offset is not None
    assert wire.unpack_bytes(message, max_bytes=2**27).nbytes == zeros.nbytes
    monkeypatch.setattr(wire, "MAX_DECOMPRESSED", 2**27)  # set once for the process
    assert wire.unpack_bytes(message).nbytes == zeros.nbytes


def test_a_message_of_many_frames_needs_bytes_for_each(monkeypatch):
    import io
    import pickle

    import numpy as np

    import graphpickle.wire as wire
    from graphpickle import BudgetExceededError

    small = [np.full(1, i) for i in range(wire.FRAMES_FLOOR + 100)]  # a frame each, 8 bytes
    assert len(wire.pack(small)) == len(small) + 2
    assert len(wire.unpack_bytes(wire.pack_bytes(small))) == len(small)
    tiny = [pickle.PickleBuffer(b"x") for _ in range(wire.FRAMES_FLOOR + 100)]  # ~11 bytes each
    message = wire.pack_bytes(tiny)
    with pytest.raises(BudgetExceededError, match="frames") as caught:
        wire.unpack_bytes(message)
    assert (caught.value.budget, caught.value.offset) == ("frames", 10)
    with pytest.raises(BudgetExceededError, match="frames"):
        wire.read(io.BytesIO(message))
    monkeypatch.setattr(wire, "FRAMES_FLOOR", 2**17)
    assert [bytes(b) for b in wire.unpack_bytes(message)] == [b"x"] * len(tiny)


def test_arguments_that_share_containers_are_charged_as_walked_whole(monkeypatch):
    import collections
    import pickle

    import numpy as np

    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError

    key = ("x", 3)
    honest = collections.Counter([key] * 1_000 + [("y", 1)] * 10)  # a shared tuple, often
    assert graphpickle.loads(pickle.dumps(honest, 2), allowed=DATA_ONLY) == honest
    # A state is stored, not walked: 100,000 references to one 1,000-item tuple load.
    objects = np.empty(100_000, dtype=object)
    objects[:] = [tuple(range(1_000))] * len(objects)
    loaded = graphpickle.loads(pickle.dumps(objects, 5), allowed=DATA_ONLY)
    assert len(loaded) == len(objects) and loaded[-1] == objects[-1]
    data = RESOURCE["UserString of lists that share lists"]()  # UserString(L) is str(L)
    with pytest.raises(BudgetExceededError, match="share containers") as caught:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert caught.value.budget == "memory" and caught.value.opcode == "REDUCE"
    assert f"at byte {caught.value.offset}" in str(caught.value)


# Values cheap to hold at the edges of the digits budget: each loads, equal to
# what pickle gives (only converting or computing with them may be refused).
_BENIGN_NUMBERS = {
    "Decimal 1E+999999": "decimal.Decimal('1E+999999')",
    "Decimal -1E-999999": "decimal.Decimal('-1E-999999')",
    "Decimal of 4,300 digits, exponent 100,000": "decimal.Decimal('9' * 4300 + 'E+100000')",
    "large-exponent Decimals as keys and members": (
        "{decimal.Decimal('1E+999999'): frozenset({decimal.Decimal('-5E-999998')})}"
    ),
    "Fraction at the digit limit": "fractions.Fraction(10**4300 - 1, 10**4300 - 3)",
    "int at the digit limit": "[10**4300 - 1, -(10**4300 - 1)]",
}


@pytest.mark.parametrize("protocol", [0, 2, 5])
@pytest.mark.parametrize("name", list(_BENIGN_NUMBERS))
def test_numbers_cheap_to_hold_load_as_pickle_loads_them(name, protocol, tmp_path):
    import decimal  # noqa: F401  (the samples' source names them)
    import fractions  # noqa: F401
    import pickle

    import graphpickle
    import graphpickle.wire as wire
    from graphpickle import DATA_ONLY

    data = pickle.dumps(eval(_BENIGN_NUMBERS[name]), protocol)
    expected = pickle.loads(data)
    assert graphpickle.loads(data, allowed=DATA_ONLY) == expected
    path = tmp_path / "sample.pickle"
    path.write_bytes(data)
    with open(path, "rb") as file:
        assert graphpickle.load(file, allowed=DATA_ONLY) == expected
    assert wire.unpack(wire.pack(expected), allowed=DATA_ONLY) == expected
    assert graphpickle.inspect(data).verdict == "data"


@pytest.mark.parametrize(
    "source",
    [
        "int(decimal.Decimal('1E+999999'))",
        "fractions.Fraction(decimal.Decimal('1E+999999'))",
        "pandas.Index([decimal.Decimal('1E+999999')], dtype='int64')",
    ],
)
def test_converting_a_large_exponent_decimal_is_refused(source):
    import decimal

    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError

    big = decimal.Decimal("1E+999999")
    head = b"\x80\x04" + _global_op("decimal", "Decimal") + _text_op("1E+999999") + b"\x85R"
    if source.startswith("int"):
        data = b"\x80\x04" + _global_op("builtins", "int") + head[2:] + b"\x85R."
    elif source.startswith("fractions"):
        data = b"\x80\x04" + _global_op("fractions", "Fraction") + head[2:] + b"\x85R."
    else:
        data = (
            b"\x80\x04" + _global_op("pandas.core.indexes.base", "_new_Index")
            + _global_op("pandas", "Index") + b"}(" + _text_op("data") + b"]" + head[2:]
            + b"a" + _text_op("dtype") + _text_op("int64") + b"u\x86R."
        )  # fmt: skip
    assert graphpickle.loads(head + b".", allowed=DATA_ONLY) == big
    with pytest.raises(BudgetExceededError) as caught:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert caught.value.budget == "digits"


def _text_op(value: str) -> bytes:
    return b"\x8c" + bytes([len(value)]) + value.encode()


def _global_op(module: str, name: str) -> bytes:
    return _text_op(module) + _text_op(name) + b"\x93"


def test_an_object_array_holding_a_number_past_the_budget_is_refused():
    # numpy and pandas may cast what an object array holds (int64 of this
    # Decimal computes 10**999999): refused at its BUILD, a documented limit
    import decimal
    import pickle

    import numpy as np

    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError

    honest = np.array([decimal.Decimal("1.5"), 10**4300 - 1], dtype=object)
    data = pickle.dumps(honest, 5)
    assert list(graphpickle.loads(data, allowed=DATA_ONLY)) == list(honest)
    data = pickle.dumps(np.array([decimal.Decimal("1E+999999")], dtype=object), 5)
    with pytest.raises(BudgetExceededError) as caught:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert (caught.value.budget, caught.value.opcode) == ("digits", "BUILD")


def _plain_walk(values: tuple, bound: int) -> tuple:
    """What ``data_checks.Arguments`` notes, walked one value at a time: each
    container once (a second reach marks sharing), every other item each time."""
    seen: set[int] = set()
    strings, visited, big, lazy, shared = [], 0, 0, 0, False
    todo = list(values)
    while todo:
        value = todo.pop()
        visited += 1
        kind = type(value)
        if kind is str:
            strings.append(value)
        elif kind is int:
            big += abs(value) > bound
        elif kind is range:
            lazy += len(value)
        elif kind in (tuple, list, dict):
            if id(value) in seen:
                shared = True
                continue
            seen.add(id(value))
            todo.extend(value)
            if kind is dict:
                todo.extend(value.values())
    return sorted(strings), visited, big, lazy, shared


_LEAVES = (
    st.text(max_size=3)
    | st.integers(-3000, 3000)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.none()
    | st.binary(max_size=3)
    | st.builds(range, st.integers(0, 50))
)
_NESTED = st.recursive(
    _LEAVES,
    lambda kids: (
        st.lists(kids, max_size=6)
        | st.lists(kids, max_size=6).map(tuple)
        | st.dictionaries(st.text(max_size=2) | st.integers(-3000, 3000), kids, max_size=4)
        | kids.map(lambda kid: [kid, (kid,), {"again": kid}])  # one object reached three times
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_NESTED, max_size=4))
def test_the_argument_walk_notes_what_a_walk_of_each_value_notes(values):
    # Containers of strs, ints and atoms only are read in bulk (Arguments._plain):
    # the strings, the items visited (the memory charge), the numbers past the
    # digits budget, lazy lengths and sharing must be what visiting each gives.
    from graphpickle.restricted import budgets
    from graphpickle.restricted.data_checks import Arguments

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(budgets, "MAX_DIGITS", 3)  # ints past 1,000 are "big"
        found = Arguments(*values)
        expected = _plain_walk(tuple(values), 10**3)
    assert (sorted(found.strings), found.visited, found.big_numbers, found.lazy, found.shared) == (
        expected
    )


def test_a_shared_container_walked_call_after_call_meets_the_walk_budget():
    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError
    from graphpickle.restricted import budgets

    data = RESOURCE["a shared list of one-item tuples copied by 20,000 calls"]()
    with pytest.raises(BudgetExceededError) as caught:
        graphpickle.loads(data, allowed=DATA_ONLY)
    assert (caught.value.budget, caught.value.opcode) == ("walk", "REDUCE")
    # each call (6 bytes) walks its arguments' tuple, kwargs (None), L and its
    # 50,000 tuples and their items: refused at the REDUCE of the call whose walk
    # goes past the floor plus a visit per byte, not later
    call = b"h\x00h\x01\x85R"
    calls = (budgets.WALK_FLOOR + len(data)) // 100_003 + 1
    assert caught.value.offset == data.index(call) + len(call) * calls - 1


def test_honest_data_past_the_walk_floor_loads(monkeypatch):
    # An object array's BUILD state lists its items: a walk of an item per byte of
    # input, past the floor (lowered here: the budget is read at each load);
    # without a container walked again, the per-byte allowance covers it.
    import io
    import pickle

    import numpy as np

    import graphpickle
    from graphpickle import DATA_ONLY, BudgetExceededError
    from graphpickle.restricted import budgets

    monkeypatch.setattr(budgets, "WALK_FLOOR", 100_000)
    array = np.array([None] * 150_000, dtype=object)
    data = pickle.dumps(array, 5)
    assert len(data) < len(array) * 1.01  # about one byte an item: N
    loaded = graphpickle.loads(data, allowed=DATA_ONLY)
    assert loaded.shape == array.shape and loaded[-1] is None
    # a stream of unknown length gets the floor only
    with pytest.raises(BudgetExceededError) as caught:
        graphpickle.load(io.BufferedReader(io.BytesIO(data)), allowed=DATA_ONLY)
    assert caught.value.budget == "walk"


def test_the_walk_floor_refuses_nothing_the_memory_floor_allowed():
    # Each item a walk visits is charged ITEM_BYTES of memory too: a stream, which
    # gets the floors only, must not be refused by walk where memory let it load.
    from graphpickle.restricted import budgets

    assert budgets.WALK_FLOOR * budgets.ITEM_BYTES >= budgets.MEMORY_FLOOR
