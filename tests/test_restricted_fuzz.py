"""Restricted loading under a fuzzer: opcode programs over allowed globals.

Hypothesis writes pickle programs from the opcodes that build, call and
change objects (REDUCE, NEWOBJ, BUILD, SETITEM(S), APPEND(S), ADDITEMS, the
memo, marks, EXT), over allowed globals, globals that must be refused, and
names that walk through modules. After each load, whatever it raised:

- ``sys.modules``, ``sys.path`` and ``builtins`` are unchanged;
- every class, module and function the programs can name is unchanged;
- every name the loader resolved (the ``pickle.find_class`` audit event) is
  one the allow-list names.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import datetime
import decimal
import fractions
import importlib
import operator
import pickle
import struct
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle import DATA_ONLY

ALLOWED_NAMES = [
    ("builtins", "list"),
    ("builtins", "dict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "tuple"),
    ("builtins", "bytearray"),
    ("builtins", "int"),
    ("builtins", "str"),
    ("builtins", "object"),
    ("builtins", "complex"),
    ("builtins", "slice"),
    ("builtins", "getattr"),
    ("collections", "OrderedDict"),
    ("collections", "defaultdict"),
    ("collections", "deque"),
    ("fractions", "Fraction"),
    ("decimal", "Decimal"),
    ("datetime", "date"),
    ("datetime", "timedelta"),
    ("copyreg", "_reconstructor"),
    ("operator", "itemgetter"),
    ("_codecs", "encode"),
    ("numpy", "dtype"),
]
REFUSED_NAMES = [
    ("os", "system"),
    ("builtins", "eval"),
    ("builtins", "setattr"),
    ("datetime", "sys"),
    ("collections", "abc"),
    ("fractions", "Fraction.__dict__"),
    ("collections", "OrderedDict.__init__"),
    ("builtins", "__import__"),
]
STRINGS = ["__len__", "__dict__", "__class__", "path", "append", "latin1", "idna", "x", "f8"]

# Everything a program can name, imported before the first load.
WATCHED: list[Any] = [
    builtins,
    collections,
    datetime,
    decimal,
    fractions,
    operator,
    np,
    sys,
    *(getattr(importlib.import_module(m), n) for m, n in ALLOWED_NAMES if "." not in n),
]


def _global(module: str, name: str) -> bytes:
    return (
        b"\x8c" + bytes([len(module)]) + module.encode()
        + b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93"
    )  # fmt: skip


def _string(text: str) -> bytes:
    data = text.encode()
    return b"\x8c" + bytes([len(data)]) + data


_SIMPLE = {
    "MARK": b"(",
    "TUPLE": b"t",
    "TUPLE1": b"\x85",
    "TUPLE2": b"\x86",
    "TUPLE3": b"\x87",
    "EMPTY_TUPLE": b")",
    "EMPTY_LIST": b"]",
    "EMPTY_DICT": b"}",
    "EMPTY_SET": b"\x8f",
    "NONE": b"N",
    "REDUCE": b"R",
    "NEWOBJ": b"\x81",
    "BUILD": b"b",
    "SETITEM": b"s",
    "SETITEMS": b"u",
    "APPEND": b"a",
    "APPENDS": b"e",
    "ADDITEMS": b"\x90",
    "FROZENSET": b"\x91",
    "DUP": b"2",
    "POP": b"0",
    "MEMOIZE": b"\x94",
    "STACK_GLOBAL": b"\x93",
    "EXT1": b"\x82\x01",
    "EXT2": b"\x83\x01\x00",
}

name = st.sampled_from(ALLOWED_NAMES * 3 + REFUSED_NAMES).map(lambda mn: _global(*mn))
value = st.one_of(
    name,
    st.sampled_from(STRINGS).map(_string),
    st.integers(-1, 3).map(lambda i: b"J" + struct.pack("<i", i)),
)
# Steps: something that pushes an object, then what may be done to it. Random
# single opcodes and EXT codes are mixed in, but most programs are well formed
# enough to reach the opcodes that change objects.
producer = st.one_of(
    value,
    st.tuples(name, value).map(lambda nv: nv[0] + nv[1] + b"\x85R"),  # global(value)
    name.map(lambda n: n + b")R"),  # global()
    st.sampled_from([b"]", b"}", b"\x8f", b")", b"N"]),  # empty containers, None
    st.integers(0, 5).map(lambda i: b"h" + bytes([i])),  # BINGET
)
modifier = st.one_of(
    st.tuples(value, value).map(lambda kv: b"}" + kv[0] + kv[1] + b"sb"),  # BUILD {k: v}
    st.tuples(value, value).map(lambda kv: b"N}" + kv[0] + kv[1] + b"s\x86b"),  # slot state
    st.tuples(value, value).map(lambda kv: kv[0] + kv[1] + b"s"),  # SETITEM
    st.tuples(value, value).map(lambda kv: b"(" + kv[0] + kv[1] + b"u"),  # SETITEMS
    value.map(lambda v: v + b"a"),  # APPEND
    value.map(lambda v: b"(" + v + b"e"),  # APPENDS
    value.map(lambda v: b"(" + v + b"\x90"),  # ADDITEMS
    value.map(lambda v: v + b"\x85R"),  # call the top with (v,)
    st.sampled_from([b"\x94", b"2", b"\x85", b")\x81"]),  # MEMOIZE, DUP, TUPLE1, NEWOBJ
)
step = st.one_of(
    st.tuples(producer, st.lists(modifier, max_size=3)).map(lambda pm: pm[0] + b"".join(pm[1])),
    st.tuples(producer, st.lists(modifier, max_size=3)).map(lambda pm: pm[0] + b"".join(pm[1])),
    st.sampled_from(sorted(_SIMPLE)).map(_SIMPLE.__getitem__),
)
program = st.lists(step, min_size=1, max_size=12).map(
    lambda steps: b"\x80\x04" + b"".join(steps) + b"."
)


def _snapshot() -> Any:
    return (
        set(sys.modules),
        list(sys.path),
        [(obj, dict(vars(obj))) for obj in WATCHED if hasattr(obj, "__dict__")],
    )


def _unchanged(before: Any, after: Any) -> None:
    modules, path, namespaces = before
    assert set(sys.modules) == modules
    assert sys.path == path
    for (obj, was), (_, now) in zip(namespaces, after[2], strict=True):
        assert was.keys() == now.keys(), f"{obj!r} gained or lost attributes"
        changed = [k for k in was if was[k] is not now[k]]
        assert not changed, f"{obj!r}: {changed} changed"


_resolved: list[tuple[str, str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "pickle.find_class":
        _resolved.append(args)


sys.addaudithook(_audit)


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=program)
def test_restricted_loading_changes_nothing_outside_the_payload(data):
    before = _snapshot()
    _resolved.clear()
    with contextlib.suppress(Exception):  # refusals, malformed programs: the state matters
        graphpickle.loads(data, allowed=DATA_ONLY)
    _unchanged(before, _snapshot())
    for module, name in _resolved:
        assert f"{module}.{name}" in DATA_ONLY, f"{module}.{name} was resolved"


def test_the_fuzzer_reaches_what_it_must_refuse():
    # Without restrictions, programs like the fuzzer's change a class and
    # resolve a module: the checks above can fail.
    build = (
        b"\x80\x04" + _global("fractions", "Fraction")
        + b"N}" + _string("__len__") + _global("builtins", "int") + b"s\x86b."
    )  # fmt: skip
    before = _snapshot()
    try:
        pickle.loads(build)
        changed = fractions.Fraction.__dict__.get("__len__") is int
    finally:
        if "__len__" in vars(fractions.Fraction):
            del fractions.Fraction.__len__
    assert changed
    _unchanged(before, _snapshot())
    with pytest.raises(graphpickle.ForbiddenGlobalError):
        graphpickle.loads(build, allowed=DATA_ONLY)
