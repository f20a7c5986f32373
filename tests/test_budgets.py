"""Resource attacks: each ends in a clear exception, within 10 s of CPU and
256 MB above the child's baseline, on restricted loading and ``inspect``
(restricted/budgets.py, dry_load; the wire's restricted unpack is restricted
loading), and the wire caps what a message decompresses to
(wire.MAX_DECOMPRESSED).

Every attack runs in a child interpreter under RLIMIT_AS and RLIMIT_CPU: one that
got past its budget is killed (or raises MemoryError) there, and the test says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import graphpickle, graphpickle.wire
    from graphpickle import DATA_ONLY

    def exponential_tuple_key():
        # t0 = (); t(i+1) = (t(i), t(i)); {t60: 1}: ~200 bytes, a hash of 2**60 steps
        ops = b"\\x80\\x04)\\x94"
        for i in range(60):
            ops += b"h" + bytes([i]) + b"h" + bytes([i]) + b"\\x86\\x94"
        return ops + b"}\\x94h" + bytes([60]) + b"K\\x01s."

    def frozenset_of_it():
        return exponential_tuple_key()[:-7] + b"(h" + bytes([60]) + b"\\x91."

    def nested_deques(depth=160_000):
        # d(i+1) = deque([d(i)]): freeing 160,000 of them recurses in C to a crash
        ops = [b"\\x80\\x04\\x8c\\x0bcollections\\x8c\\x05deque\\x93\\x94h\\x00)R\\x94"]
        for i in range(1, depth + 1):
            ops.append(b"h\\x00(j" + i.to_bytes(4, "little") + b"l\\x85R\\x94")
        return b"".join(ops) + b"."

    def text(value):
        data = value.encode()
        return b"\\x8c" + bytes([len(data)]) + data

    def glob(module, name):
        return text(module) + text(name) + b"\\x93"

    def long(n):
        return b"\\x8a\\x08" + n.to_bytes(8, "little", signed=True)

    def short_list(count):
        return b"](" + b"".join(b"M" + i.to_bytes(2, "little") for i in range(count)) + b"e"

    def shared_list_copied(calls=200_000, items=50_000):
        # L = [0, ..., items - 1]; list(L) made ``calls`` times: 7 bytes each
        head = b"\\x80\\x04" + glob("builtins", "list") + b"\\x94" + short_list(items) + b"\\x94"
        return head + b"(" + b"h\\x00h\\x01\\x85R" * calls + b"l."

    def blocks_stating_their_length():
        # SparseArray state whose BlockIndex states a block of 2**40 positions
        return (
            b"\\x80\\x04" + glob("pandas._libs.sparse", "BlockIndex") + long(2**41)
            + glob("numpy", "array") + b"]K\\x00a\\x85R"
            + glob("numpy", "array") + b"]" + long(2**40) + b"a\\x85R\\x87R."
        )  # fmt: skip

    ATTACKS = {
        "list(range(30,000,000))": lambda: (
            b"\\x80\\x04" + glob("builtins", "list") + glob("builtins", "range")
            + long(30_000_000) + b"\\x85R\\x85R."
        ),
        "bytearray(10**10)": lambda: (
            b"\\x80\\x04" + glob("builtins", "bytearray") + long(10**10) + b"\\x85R."
        ),
        "numpy _reconstruct of a 10**12-byte shape": lambda: (
            b"\\x80\\x04" + glob("numpy._core.multiarray", "_reconstruct") + glob("numpy", "ndarray")
            + long(10**6) + long(10**6) + b"\\x86C\\x01b\\x87R."
        ),
        "DataFrame(None, 20,000 rows, 20,000 columns)": lambda: (
            b"\\x80\\x04" + glob("pandas", "DataFrame") + b"N" + short_list(20_000)
            + short_list(20_000) + b"\\x87R."
        ),
        "DatetimeIndex of range(10**9)": lambda: (
            b"\\x80\\x04" + glob("pandas.core.indexes.datetimes", "_new_DatetimeIndex")
            + glob("pandas", "DatetimeIndex") + b"}" + text("data") + glob("builtins", "range")
            + long(10**9) + b"\\x85Rs\\x86R."
        ),
        "a shared list copied by 200,000 calls": shared_list_copied,
        "INT of 1,000,000 digits (int limit lifted)": lambda: b"\\x80\\x02I" + b"9" * 10**6 + b"\\n.",
        "deques nested 160,000 deep": nested_deques,
        "exponential tuple key": exponential_tuple_key,
        "exponential tuple in a frozenset": frozenset_of_it,
        "BYTEARRAY8 declaring 1 TiB": lambda: b"\\x80\\x05\\x96" + (2**40).to_bytes(8, "little") + b".",
        "memo index 2**27": lambda: b"\\x80\\x02N" + b"r" + (2**27).to_bytes(4, "little") + b".",
        "Fraction of a Decimal with a huge exponent": lambda: (
            b"\\x80\\x04\\x8c\\tfractions\\x8c\\x08Fraction\\x93\\x8c\\x07decimal\\x8c\\x07Decimal"
            b"\\x93\\x8c\\x0b1e999999999\\x85R\\x85R."
        ),
    }

    def restricted(data):
        return graphpickle.loads(data, allowed=DATA_ONLY)

    def inspect(data):
        # (a report, not an exception: what matters is that it comes, in budget)
        return "inspect's verdict: " + graphpickle.inspect(data).verdict

    mode, name = sys.argv[1], sys.argv[2]
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    baseline = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (baseline + 256 * 2**20, hard))
    resource.setrlimit(resource.RLIMIT_CPU, (10, 11))
    load = {"restricted": restricted, "inspect": inspect}[mode]
    data = ATTACKS[name]()
    if "int limit lifted" in name:
        sys.set_int_max_str_digits(0)
    start = time.process_time()
    try:
        outcome = load(data)
    except MemoryError:
        outcome = "MemoryError"
    except graphpickle.UnpicklingError as exc:
        outcome = type(exc).__name__ + ": " + str(exc)
    except Exception as exc:
        outcome = "other " + type(exc).__name__ + ": " + str(exc)
    else:
        outcome = outcome if isinstance(outcome, str) else "loaded"
    print(json.dumps({"outcome": outcome, "cpu": time.process_time() - start}))
    """
)

ATTACKS = [
    "list(range(30,000,000))",
    "bytearray(10**10)",
    "numpy _reconstruct of a 10**12-byte shape",
    "DataFrame(None, 20,000 rows, 20,000 columns)",
    "DatetimeIndex of range(10**9)",
    "a shared list copied by 200,000 calls",
    "INT of 1,000,000 digits (int limit lifted)",
    "deques nested 160,000 deep",
    "exponential tuple key",
    "exponential tuple in a frozenset",
    "BYTEARRAY8 declaring 1 TiB",
    "memo index 2**27",
    "Fraction of a Decimal with a huge exponent",
]


def _run(mode: str, name: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, name], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ATTACKS)
@pytest.mark.parametrize("mode", ["restricted", "inspect"])
def test_a_resource_attack_ends_in_a_clear_exception(mode, name):
    result = _run(mode, name)
    outcome = result["outcome"]
    assert outcome != "MemoryError" and not outcome.startswith(("other", "loaded")), outcome
    assert result["cpu"] < 10
    if mode == "restricted":
        assert outcome.startswith(("BudgetExceededError", "ForbiddenGlobalError")), outcome


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
