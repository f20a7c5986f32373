"""Resource attacks, and states that crash the process later: generators of
payloads, and a runner that tries one in a child interpreter under
``RLIMIT_AS`` (256 MB above the child's baseline) and ``RLIMIT_CPU`` (10 s).

    from resource_attacks import RESOURCE, CRASHERS, WIRE, try_one   # benchmarks/ on sys.path

Every payload is generated here, opcode by opcode or by changing bytes of what
``pickle.dumps`` writes, from attack classes that are publicly documented:

- the ``pickle`` documentation's warning that a pickle can use memory and time
  out of proportion to its size, and ``pickletools`` (opcode semantics: memo
  indices, BYTEARRAY8's declared length, text opcodes);
- the "billion laughs" and hash-flooding classes (shared structures whose
  hash visits each share again; exponential work from a few hundred bytes);
- CPython's int/str conversion limit (CVE-2020-10735, ``sys.set_int_max_str_digits``),
  and ``decimal``'s and ``fractions``' handling of huge exponents;
- compression bombs (a small frame that decompresses to gigabytes, or more than
  it declares);
- numpy's and pandas' pickling code (``ndarray.__setstate__``, pandas'
  ``_unpickle_block``, ``SparseArray``, ``Categorical``), whose reconstructors
  trust the codes, positions and lengths in their state;
- C deallocators that recurse (nested containers freed to a crash).

``try_one(mode, name)`` runs one sample (a name of ``RESOURCE``, ``CRASHERS``
or ``WIRE``) in a child and returns ``{"outcome": ..., "cpu": ...}``. Modes:
``control`` (plain ``pickle.loads``), ``restricted``
(``graphpickle.loads(data, allowed=DATA_ONLY)``), ``file`` (the same, by
``graphpickle.load`` from a file), ``wire`` (an unsigned wire
message of the payload, ``wire.unpack(..., allowed=DATA_ONLY)``), ``inspect``,
``picklescan`` and ``fickling``. After a load, a crasher's object is used
(``repr``, ``==``, a copy, ``np.asarray``, a pickle round trip). The outcome
is ``refused: <exception>``, ``loaded``, ``MemoryError``,
``other: <exception>``, ``verdict: <inspect's>`` (and ``(malformed)``), ``flagged``, ``passed``,
``error: <exception>`` (a scanner), or ``died: <signal>`` and ``timeout``,
told by the parent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

RLIMIT_AS_ABOVE_BASELINE = 256 * 2**20
RLIMIT_CPU_SECONDS = 10


# -- a small assembler (protocol 4 opcodes) -------------------------------------


def _text(value: str) -> bytes:
    data = value.encode()
    return b"\x8c" + bytes([len(data)]) + data


def _global(module: str, name: str) -> bytes:
    return _text(module) + _text(name) + b"\x93"


def _long(n: int) -> bytes:
    return b"\x8a\x08" + n.to_bytes(8, "little", signed=True)


def _short_list(count: int) -> bytes:
    return b"](" + b"".join(b"M" + i.to_bytes(2, "little") for i in range(count)) + b"e"


PROTO4 = b"\x80\x04"


def _numpy_core() -> str:
    """Where this numpy's pickles name its reconstructors (numpy 2: numpy._core)."""
    import numpy as np

    return "numpy._core" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core"


# -- resource attacks: work or memory out of proportion to the input -------------------


def _exponential_tuple_key() -> bytes:
    # t0 = (); t(i+1) = (t(i), t(i)); {t60: 1}: ~200 bytes, a hash of 2**60 steps
    ops = PROTO4 + b")\x94"
    for i in range(60):
        ops += b"h" + bytes([i]) + b"h" + bytes([i]) + b"\x86\x94"
    return ops + b"}\x94h" + bytes([60]) + b"K\x01s."


def _exponential_frozenset() -> bytes:
    return _exponential_tuple_key()[:-7] + b"(h" + bytes([60]) + b"\x91."


def _nested_deques(depth: int = 160_000) -> bytes:
    # d(i+1) = deque([d(i)]): freeing 160,000 of them recurses in C to a crash
    ops = [PROTO4 + _global("collections", "deque") + b"\x94h\x00)R\x94"]
    for i in range(1, depth + 1):
        ops.append(b"h\x00(j" + i.to_bytes(4, "little") + b"l\x85R\x94")
    return b"".join(ops) + b"."


def _shared_list_copied(calls: int = 200_000, items: int = 50_000, each: bytes = b"") -> bytes:
    # L = [0, ..., items - 1] (each item then made a tuple by ``each``: TUPLE1);
    # list(L) made ``calls`` times, 6 bytes of input each (BINGET, BINGET, TUPLE1, REDUCE)
    body = b"".join(b"M" + i.to_bytes(2, "little") + each for i in range(items))
    head = PROTO4 + _global("builtins", "list") + b"\x94](" + body + b"e\x94"
    return head + b"(" + b"h\x00h\x01\x85R" * calls + b"l."


def _dag_kept_by(step: bytes, shape: str) -> bytes:
    # t0 = (); t(i+1) = (t(i), t(i)), 60 times, each made by ``step`` from the top
    # of the stack alone (no memo: DUP, or an opcode that leaves the tuple where
    # it is); then a dict key or a set member: a hash of 2**60 steps
    dag = b")" + step * 60
    if shape == "key":
        return PROTO4 + b"}" + dag + b"K\x01s."
    return PROTO4 + b"\x8f(" + dag + b"\x90."


def _long4(n: int) -> bytes:
    data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8b" + len(data).to_bytes(4, "little") + data


def _heavy_tuple(levels: int = 18) -> bytes:
    # memo 0 = (), memo i+1 = (memo i, memo i): 2**(levels + 1) items' hashing work
    ops = b")\x940"
    for i in range(levels):
        ops += b"h" + bytes([i]) + b"h" + bytes([i]) + b"\x86\x940"
    return ops  # (left in the memo at index ``levels``, not on the stack)


def _heavy_key_placed(times: int = 20_000, opcode: bytes = b"u") -> bytes:
    # a key within tuple_work (2**19 items' work), placed ``times`` times
    get = b"h\x12"
    if opcode == b"u":  # a dict of (key, 1) pairs
        return PROTO4 + _heavy_tuple() + b"}(" + (get + b"K\x01") * times + b"u."
    return PROTO4 + _heavy_tuple() + b"\x8f(" + get * times + b"\x90."  # a set


def _squared_fractions(times: int = 26) -> bytes:
    # x = Fraction(3, 2); x = Fraction(x, Fraction(1, x)) (x squared), ``times`` times
    fraction = _global("fractions", "Fraction")
    ops = PROTO4 + fraction + b"\x94K\x03K\x02\x86R\x94"  # memo 0: Fraction, 1: x
    for i in range(times):
        x = b"h" + bytes([i + 1])
        ops += b"h\x00" + x + b"h\x00K\x01" + x + b"\x86R\x86R\x94"
    return ops + b"."


def _str_of_shared_lists(levels: int = 40) -> bytes:
    # str(L40): a repr of 2**40 lists
    return PROTO4 + _global("builtins", "str") + _shared_lists(levels) + b"\x85R."


def _shared_lists(levels: int) -> bytes:
    # L0 = []; L(i+1) = [Li, Li] in the memo at index i + 1, left on the stack
    ops = b"]\x940"
    for i in range(levels):
        ops += b"(h" + bytes([i]) + b"h" + bytes([i]) + b"l\x940"
    return ops + b"h" + bytes([levels])


def _dtype_of_shared_fields(levels: int = 30) -> bytes:
    # F0 = [("a", "f8")]; F(i+1) = [("a", Fi), ("b", Fi)]: a dtype of 2**30 fields
    ops = PROTO4 + _global("numpy", "dtype") + b"(" + _text("a") + _text("f8") + b"\x86l\x940"
    for i in range(levels):
        get = b"h" + bytes([i])
        ops += b"(" + _text("a") + get + b"\x86" + _text("b") + get + b"\x86l\x940"
    return ops + b"h" + bytes([levels]) + b"\x85R."


def _pandas_cast_of_a_huge_decimal() -> bytes:
    # _new_Index(Index, {"data": [Decimal("1e100000000")], "dtype": "int64"})
    return (
        PROTO4 + _global("pandas.core.indexes.base", "_new_Index") + _global("pandas", "Index")
        + b"}(" + _text("data") + b"]" + _global("decimal", "Decimal") + _text("1e100000000")
        + b"\x85Ra" + _text("dtype") + _text("int64") + b"u\x86R."
    )  # fmt: skip


RESOURCE: dict[str, Callable[[], bytes]] = {
    "exponential tuple key": _exponential_tuple_key,
    "exponential tuple in a frozenset": _exponential_frozenset,
    "shared tuples made by DUP, as a dict key": lambda: _dag_kept_by(b"2\x86", "key"),
    "shared tuples made by DUP, as a set member": lambda: _dag_kept_by(b"2\x86", "member"),
    "shared tuples kept by BUILD, as a dict key": lambda: _dag_kept_by(b"2\x86Nb", "key"),
    "shared tuples kept by an empty SETITEMS, as a set member": lambda: _dag_kept_by(
        b"2\x86(u", "member"
    ),
    # (pickletools reads INT in base 10, the C unpickler in any base: a walk
    # that stopped there left the rest to the C unpickler unchecked)
    "shared tuples after an INT only the C unpickler reads": lambda: (
        _dag_kept_by(b"2\x86", "key").replace(PROTO4, PROTO4 + b"I0x1\n0", 1)
    ),
    "deques nested 160,000 deep": _nested_deques,
    "BYTEARRAY8 declaring 1 TiB": lambda: b"\x80\x05\x96" + (2**40).to_bytes(8, "little") + b".",
    "BINBYTES8 declaring 64 GiB": lambda: b"\x80\x04\x8e" + (2**36).to_bytes(8, "little") + b"x.",
    "memo index 2**27": lambda: b"\x80\x02N" + b"r" + (2**27).to_bytes(4, "little") + b".",
    "Fraction of a Decimal with a huge exponent": lambda: (
        PROTO4 + _global("fractions", "Fraction") + _global("decimal", "Decimal")
        + _text("1e999999999") + b"\x85R\x85R."
    ),
    "list(range(30,000,000))": lambda: (
        PROTO4 + _global("builtins", "list") + _global("builtins", "range") + _long(30_000_000)
        + b"\x85R\x85R."
    ),
    "bytearray(10**10)": lambda: PROTO4 + _global("builtins", "bytearray") + _long(10**10) + b"\x85R.",
    "numpy _reconstruct of a 10**12-byte shape": lambda: (
        PROTO4 + _global(_numpy_core() + ".multiarray", "_reconstruct") + _global("numpy", "ndarray")
        + _long(10**6) + _long(10**6) + b"\x86C\x01b\x87R."
    ),
    "DataFrame(None, 20,000 rows, 20,000 columns)": lambda: (
        PROTO4 + _global("pandas", "DataFrame") + b"N" + _short_list(20_000)
        + _short_list(20_000) + b"\x87R."
    ),
    "a float Index of range(10**9)": lambda: (
        PROTO4 + _global("pandas.core.indexes.base", "_new_Index") + _global("pandas", "Index")
        + b"}(" + _text("data") + _global("builtins", "range") + _long(10**9) + b"\x85R"
        + _text("dtype") + _text("float64") + b"u\x86R."
    ),
    "a shared list copied by 200,000 calls": _shared_list_copied,
    # (a list of one-item tuples: no bulk reading, each item a container)
    "a shared list of one-item tuples copied by 20,000 calls": lambda: _shared_list_copied(
        20_000, 50_000, b"\x85"
    ),
    "INT of 3,000,000 digits (int limit lifted)": lambda: b"\x80\x02I" + b"9" * 3 * 10**6 + b"\n.",
    # conversions an admitted callable makes, whose cost is the value's, not the size's
    "int of a Decimal with a huge exponent": lambda: (
        PROTO4 + _global("builtins", "int") + _global("decimal", "Decimal") + _text("1e100000000")
        + b"\x85R\x85R."
    ),
    "int of a Decimal of 1,000,000 digits": lambda: (
        PROTO4 + _global("builtins", "int") + _global("decimal", "Decimal")
        + b"\x8d" + (10**6).to_bytes(8, "little") + b"9" * 10**6 + b"\x85R\x85R."
    ),
    "Decimal of a 1 MB int": lambda: (
        PROTO4 + _global("decimal", "Decimal") + _long4(3**5_000_000) + b"\x85R."
    ),
    "str of a 1 MB int (int limit lifted)": lambda: (
        PROTO4 + _global("builtins", "str") + _long4(3**5_000_000) + b"\x85R."
    ),
    "a Fraction squared 26 times": _squared_fractions,
    "a pandas int64 Index of a huge Decimal": _pandas_cast_of_a_huge_decimal,
    "str of lists that share lists": _str_of_shared_lists,
    "UserString of lists that share lists": lambda: (
        PROTO4 + _global("collections", "UserString") + _shared_lists(40) + b"\x85R."
    ),
    "numpy dtype of fields that share fields": _dtype_of_shared_fields,
    # hashing: a key within tuple_work, hashed again each time it is placed
    "a heavy tuple key placed 20,000 times": _heavy_key_placed,
    "a heavy tuple added to a set 20,000 times": lambda: _heavy_key_placed(opcode=b"\x90"),
    "frozenset of a heavy tuple listed 20,000 times": lambda: (
        PROTO4 + _global("builtins", "frozenset") + _heavy_tuple() + b"(" + b"h\x12" * 20_000
        + b"l\x85R."
    ),
}  # fmt: skip


# -- states that crash later: allowed names, state that breaks an invariant --------------


class NotApplicable(Exception):
    """A sample made by changing bytes that this environment's pickle lacks (or
    of a type it lacks): ``try_one`` says ``not applicable``."""


def _changed(obj_source: str, old: bytes, new: bytes, protocol: int = 5) -> Callable[[], bytes]:
    """The pickle of ``eval(obj_source)`` with the first ``old`` replaced by ``new``."""

    def make() -> bytes:
        import pickle

        import numpy as np
        import pandas as pd

        if "StringDType" in obj_source and not hasattr(np.dtypes, "StringDType"):
            raise NotApplicable("numpy 1 has no StringDType")

        data = pickle.dumps(eval(obj_source, {"np": np, "pd": pd}), protocol)
        if old not in data:
            raise NotApplicable(f"this numpy and pandas pickle {obj_source} without {old!r}")
        return data.replace(old, new, 1)

    return make


CRASHERS: dict[str, Callable[[], bytes]] = {
    # int32 codes (40,000 categories): one set 2**31 - 1 past them
    "Categorical codes past its categories": _changed(
        "pd.Categorical(np.arange(40_000))", b"\x05\x00\x00\x00\x06\x00\x00\x00",
        b"\x05\x00\x00\x00\xff\xff\xff\x7f"
    ),
    # an object array of 3 items given a list of 1 (numpy reads past it)
    "object array state longer than its list": _changed(
        "np.array([None, 1, 'x'], dtype=object)", b"K\x03\x85", b"K\x7f\x85", protocol=2
    ),
    "StringDType array state longer than its list": _changed(
        "np.array(['a', 'b'], dtype=np.dtypes.StringDType())", b"K\x02\x85", b"K\x7f\x85", protocol=2
    ),
    # a frame's two blocks placed at columns far past its two
    "BlockManager placing columns past its axis": _changed(
        "pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})", b"K\x01K\x02K\x01\x87",
        b"J\xff\xff\xff\x0fJ\x00\x00\x00\x10K\x01\x87"
    ),
    # int32 codes of a MultiIndex's first level (40,000 strings), the first set to
    # -2**31 (pandas lets a code below -1 pass; its repr reads the level there)
    "MultiIndex code of -2**31": _changed(
        "pd.MultiIndex.from_product([[f's{i:05}' for i in range(40_000)], [1]])",
        b"\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00",
        b"\x00\x00\x00\x80\x01\x00\x00\x00\x02\x00\x00\x00",
    ),
}  # fmt: skip


# -- the wire: sizes a message states ------------------------------------------------------


def _wire_frames(payload: bytes) -> list[bytes]:
    """An unsigned wire message whose pickle is ``payload``."""
    import graphpickle.wire as wire

    header = bytes(wire.pack(None)[0])
    return [header[:-8] + len(payload).to_bytes(8, "little"), payload]


def _declared_raw_length(frames: list[bytes], declared: int, real: int) -> list[bytes]:
    header = frames[0]
    at = header.find(real.to_bytes(8, "little"))
    assert at > 0
    return [header[:at] + declared.to_bytes(8, "little") + header[at + 8 :], *frames[1:]]


def _compressed_zeros(nbytes: int) -> list[bytes]:
    import numpy as np

    import graphpickle.wire as wire

    return [bytes(f) for f in wire.pack(np.zeros(nbytes // 8), compression="zstd")]


def _message(frames: list[bytes], raws: list[int] | None = None, codec: int = 2) -> bytes:
    """An unsigned wire message (as one ``bytes``) whose pickle is a list of
    its buffers, one per frame, compressed with ``codec`` (1 lz4, 2 zstd) to
    ``raws`` bytes each if given (the header's tables, written from scratch)."""
    import struct

    import graphpickle.wire as wire

    payload = b"\x80\x05](" + b"\x97" * len(frames) + b"e."
    first = bytes(wire.pack(None)[0])
    document = first[18 : 18 + struct.unpack_from("<I", first, 6)[0]]
    lengths = [len(payload), *map(len, frames)]
    tables = b"".join(n.to_bytes(8, "little") for n in lengths)
    flags = 0
    if raws is not None:
        flags = 0x02
        tables += b"".join(n.to_bytes(8, "little") for n in [len(payload), *raws])
        tables += bytes([0] + [codec] * len(frames))
    prefix = struct.pack("<4sBBIII", b"GPKW", 1, flags, len(document), len(lengths), len(frames))
    return b"".join([prefix, document, tables, payload, *frames])


def _zstd_of_zeros(nbytes: int) -> bytes:
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(1 << 24)
    pieces = [compressor.compress(chunk) for _ in range(nbytes >> 24)]
    return b"".join([*pieces, compressor.flush()])


def _lz4_of_zeros(nbytes: int) -> bytes:
    import lz4.block

    return bytes(lz4.block.compress(bytes(nbytes), store_size=False))


WIRE: dict[str, Callable[[], list[bytes] | bytes]] = {
    # declares 16 GiB: refused before anything is decompressed
    "a frame declaring 16 GiB": lambda: _declared_raw_length(
        _compressed_zeros(2**20), 2**34, 2**20
    ),
    # declares 1 MiB, decompresses to 512 MiB
    "a frame decompressing past what it declares": lambda: _declared_raw_length(
        _compressed_zeros(2**29), 2**20, 2**29
    ),
    # honest frames (each decompresses to what it declares) of a few hundred bytes
    "a zstd frame of 2 GiB, honestly": lambda: _message(
        [_zstd_of_zeros(2**31 - 2**24)], [2**31 - 2**24]
    ),
    "8 zstd frames of 256 MiB, honestly": lambda: _message(
        [_zstd_of_zeros(2**28)] * 8, [2**28] * 8
    ),
    "an lz4 frame 255x its size, honestly": lambda: _message(
        [_lz4_of_zeros(2**28)], [2**28], codec=1
    ),
    # 2**22 empty frames: 32 MiB of header, each frame an object of 100-200 bytes
    "a header of 2**22 empty frames": lambda: _message([b""] * (2**22 - 1)),
}


# -- the child -------------------------------------------------------------------------------


def _use(obj: object) -> None:
    import contextlib
    import copy
    import pickle

    import numpy as np

    for use in (
        repr,
        lambda o: o == o,
        copy.copy,
        np.asarray,
        lambda o: pickle.loads(pickle.dumps(o)),
    ):
        with contextlib.suppress(Exception):  # (a clear exception is fine: a crash is not)
            use(obj)


def _scan(mode: str, data: bytes) -> str:
    import io

    if mode == "picklescan":
        from picklescan.scanner import scan_pickle_bytes

        result = scan_pickle_bytes(io.BytesIO(data), "sample")
        return "flagged" if result.issues_count > 0 else "passed"
    from fickling.analysis import Severity, check_safety
    from fickling.fickle import StackedPickle

    stacked = StackedPickle.load(io.BytesIO(data), fail_on_decode_error=False)
    flagged = any(
        p.has_invalid_opcode or check_safety(p).severity > Severity.LIKELY_SAFE for p in stacked
    )
    return "flagged" if flagged else "passed"


def _child(mode: str, name: str) -> None:
    import contextlib
    import io
    import logging
    import pickle
    import resource
    import tempfile
    import time

    import graphpickle
    import graphpickle.wire as wire
    from graphpickle import DATA_ONLY

    logging.getLogger("picklescan").setLevel(logging.CRITICAL)
    try:
        if name in WIRE:
            frames, data = WIRE[name](), b""  # (a message as bytes: unpack_bytes)
        else:
            data = (RESOURCE.get(name) or CRASHERS[name])()
            frames = _wire_frames(data)
    except NotApplicable as exc:
        print(json.dumps({"outcome": f"not applicable: {exc}", "cpu": 0.0}), flush=True)
        return
    if mode in ("picklescan", "fickling"):
        import fickling  # noqa: F401  (imported before the limits: they are the attack's)
        import picklescan.scanner  # noqa: F401
    if "int limit lifted" in name:
        sys.set_int_max_str_digits(0)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        baseline = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (baseline + RLIMIT_AS_ABOVE_BASELINE, hard))
    resource.setrlimit(resource.RLIMIT_CPU, (RLIMIT_CPU_SECONDS, RLIMIT_CPU_SECONDS + 1))
    start = time.process_time()
    try:
        if mode == "inspect":
            report = graphpickle.inspect(data)
            outcome = "verdict: " + report.verdict + (" (malformed)" if report.error else "")
        elif mode in ("picklescan", "fickling"):
            with contextlib.redirect_stdout(io.StringIO()):
                outcome = _scan(mode, data)
        else:
            if mode == "control":
                obj = pickle.loads(data)
            elif mode == "restricted":
                obj = graphpickle.loads(data, allowed=DATA_ONLY)
            elif mode == "file":  # (a file's read(n) allocates n bytes first)
                with tempfile.TemporaryFile() as file:
                    file.write(data)
                    file.seek(0)
                    obj = graphpickle.load(file, allowed=DATA_ONLY)
            elif isinstance(frames, bytes):
                obj = wire.unpack_bytes(frames, allowed=DATA_ONLY)
            else:
                obj = wire.unpack(frames, allowed=DATA_ONLY)
            if name in CRASHERS:
                _use(obj)
            del obj
            outcome = "loaded"
    except MemoryError:
        outcome = "MemoryError"
    except (pickle.UnpicklingError, EOFError) as exc:  # (graphpickle's are subclasses)
        outcome = f"refused: {type(exc).__name__}: {str(exc)[:300]}"
    except Exception as exc:
        words = f"{type(exc).__name__}: {str(exc)[:300]}"
        outcome = ("error: " if mode in ("picklescan", "fickling") else "other: ") + words
    print(json.dumps({"outcome": outcome, "cpu": time.process_time() - start}), flush=True)


def try_one(mode: str, name: str, timeout: float = 120) -> dict[str, object]:
    """Run sample ``name`` in ``mode`` in a child (see the module docstring)."""
    try:
        done = subprocess.run(
            [sys.executable, __file__, mode, name], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "cpu": None}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines:
        return json.loads(lines[-1])  # type: ignore[no-any-return]
    return {"outcome": f"died: {done.returncode}", "cpu": None, "stderr": done.stderr[-1500:]}


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
