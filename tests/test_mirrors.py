"""Rules that ``_speedups.c`` writes again in C, each checked over its whole domain
against the Python rule it mirrors (docs/development.md, "Rules written twice").

A C rule that disagrees with its Python one makes the C hook either ask Python
every time (slower) or answer what Python would not (a wrong payload); each test
below enumerates the inputs on which the rule decides and asks both sides.
"""

from __future__ import annotations

import math
import pickletools
import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import graphpickle
from graphpickle.core import captures, policy
from graphpickle.core import reducers as _reducers
from graphpickle.core.native import speedups

needs_the_c_hook = pytest.mark.skipif(
    speedups is None or not _reducers.CACHING,
    reason="compares the C hook with the Python rules: needs the C part and its caches",
)


@contextmanager
def handler_calls(handler: Callable[..., Any]) -> Iterator[list[Any]]:
    """The objects ``handler(state, obj)`` (a Python handler the C hook falls
    back to) is called for while the block runs."""
    calls: list[Any] = []

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is handler.__code__:
            calls.append(list(frame.f_locals.values())[1])

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


# --- which captures can grow in place (captures._FIXED_SIZE, _module_builtin; C fixed_size)
# and which are modules (isinstance(value, ModuleType); C is_module_now) -------------------


class Sized:
    def __len__(self) -> int:
        return 3


class StrSub(str):
    pass


class IntSub(int):
    pass


def _a_function() -> None:
    pass


# Every type the two rules name, and values of the types next to them: subclasses,
# containers, bound builtin methods, objects with and without a length. (Instances
# of a module subclass, or objects posing as modules, cannot be pickled at all: a
# function that captures one never has an entry.)
CAPTURES: dict[str, Any] = {
    "int": 7,
    "float": 1.5,
    "bool": True,
    "complex": 1j,
    "None": None,
    "function": _a_function,
    "module": math,
    "type": int,
    "str": "text",
    "bytes": b"bytes",
    "builtin function of a module": len,
    "builtin function of another module": math.floor,
    "builtin method of a list": [1].append,
    "list": [1, 2],
    "dict": {1: 2},
    "tuple": (1, 2),
    "set": {1},
    "frozenset": frozenset({1}),
    "bytearray": bytearray(b"ab"),
    "str subclass": StrSub("sub"),
    "int subclass": IntSub(3),
    "object with a length": Sized(),
    "object without a length": object(),
}


@needs_the_c_hook
@pytest.mark.parametrize("what", list(CAPTURES))
def test_the_c_hook_reads_captures_as_the_python_rules_do(what: str) -> None:
    """A remembered ``__main__`` function that reads the capture (and a list, so
    that its growable captures are checked): sent again, the C hook answers it
    itself exactly when the Python rules leave nothing to ask again, i.e. every
    capture that can grow has a length. Where the C rule for fixed sizes or for
    modules differs, the C hook falls back to the Python handler instead."""
    value = CAPTURES[what]
    namespace: dict[str, Any] = {"__name__": "__main__", "V": value, "L": [1, 2, 3]}
    exec("def f():\n    return V, L\n", namespace)
    f = namespace["f"]
    graphpickle.dumps(f)
    assert id(f) in _reducers._functions
    growable = _reducers._functions[id(f)][_reducers._GROWABLE]  # captures.growable_sizes
    asked_again = growable is not None and -1 in growable
    with handler_calls(_reducers._reduce_function) as calls:
        graphpickle.dumps(f)
    assert (f in calls) == asked_again, (what, growable)


def test_the_captures_cover_both_rules() -> None:
    """The domain above holds every type of captures._FIXED_SIZE, values on both
    sides of _module_builtin, and values on both sides of the module rule."""
    values = list(CAPTURES.values())
    assert {type(v) for v in values} >= captures._FIXED_SIZE
    assert {captures._module_builtin(v) for v in values} == {True, False}
    assert {isinstance(v, types.ModuleType) for v in values} == {True, False}


# --- which names go by value whatever else holds (policy.reason_by_names,
# class_reason; C by_value_by_names) ----------------------------------------------------

MODULE_NAMES = [*sorted(policy._MAIN_MODULES), "graphpickle_mirror_module"]
QUALNAMES = ["f", "<lambda>", "x<lambda>y", "<locals>", "x<locals>y"]


def _make(kind: str, module_name: str, qualname: str) -> Any:
    if kind == "function":
        namespace: dict[str, Any] = {}
        exec("def f():\n    return 1\n", namespace)
        obj = namespace["f"]
    else:
        obj = type("C", (), {})
    obj.__module__ = module_name
    obj.__qualname__ = qualname
    return obj


@needs_the_c_hook
@pytest.mark.parametrize("kind", ["function", "class"])
@pytest.mark.parametrize("module_name", MODULE_NAMES)
@pytest.mark.parametrize("qualname", QUALNAMES)
def test_the_c_hook_sends_by_name_as_the_policy_does(
    kind: str, module_name: str, qualname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object importable under these names (its module in sys.modules holds
    it there), handed to the C hook's by-reference table: the C hook answers it
    by reference from then on exactly when the policy sends it by reference."""
    module = sys.modules.get(module_name)
    if module is None:
        module = types.ModuleType(module_name)
        monkeypatch.setitem(sys.modules, module_name, module)
    obj = _make(kind, module_name, qualname)
    monkeypatch.setattr(module, qualname, obj, raising=False)
    reason = policy.function_reason(obj) if kind == "function" else policy.class_reason(obj)
    handler = _reducers._reduce_function if kind == "function" else _reducers._reduce_class
    assert speedups is not None
    speedups.remember_by_reference(obj)
    with handler_calls(handler) as calls:
        graphpickle.dumps(obj)
    assert (obj not in calls) == (reason is None), (kind, module_name, qualname, reason)


def test_the_names_cover_every_rule() -> None:
    """The names above reach every answer of the policy's name rule."""
    reasons = {policy.reason_by_names(m, q) for m in MODULE_NAMES for q in QUALNAMES}
    assert reasons == {
        None,
        policy.ByValueReason.MAIN,
        policy.ByValueReason.LAMBDA,
        policy.ByValueReason.LOCAL,
    }


# --- how each opcode lays out its argument (pickletools; _opcodes.h's opcode_arg,
# read by the C walks of _speedups.c and _sets.c) -------------------------------------

OPCODES_H = Path(__file__).resolve().parent.parent / "src" / "graphpickle" / "_opcodes.h"
_LAYOUT = {
    pickletools.UP_TO_NEWLINE: "ARG_LINE",
    pickletools.TAKEN_FROM_ARGUMENT1: "ARG_LEN1",
    pickletools.TAKEN_FROM_ARGUMENT4: "ARG_LEN4",
    pickletools.TAKEN_FROM_ARGUMENT4U: "ARG_LEN4",
    pickletools.TAKEN_FROM_ARGUMENT8U: "ARG_LEN8",
}


def _c_opcode_args() -> dict[int, int | str]:
    """``opcode_arg`` as ``init_opcode_args`` fills it (codes it leaves at
    ARG_UNKNOWN are absent): read from the C source, whose few statement forms
    are matched exactly (a form not matched fails the test below)."""
    body = OPCODES_H.read_text().split("init_opcode_args(void)", 1)[1].split("\n}\n", 1)[0]
    table: dict[int, int | str] = {}
    strings = dict(re.findall(r'static const char (\w+)\[\] = "([^"]*)";', body))
    for code in strings.pop("no_arg", ""):
        table[ord(code)] = 0
    for code in strings.pop("line_arg", ""):
        table[ord(code)] = "ARG_LINE"
    binary = re.search(r"no_arg_binary\[\] = \{([^}]*)\}", body)
    assert binary is not None and not strings, "a statement form the reader does not know"
    for code in binary.group(1).split(","):
        table[int(code, 16)] = 0
    literal = r"opcode_arg\[('.'|0x[0-9a-f]+)\] = "  # (a code written out)
    for chain, value in re.findall(rf"^\s*((?:{literal.replace('(', '(?:')})+)(\w+);", body, re.M):
        for code in re.findall(literal, chain):
            key = ord(code[1]) if code.startswith("'") else int(code, 16)
            table[key] = int(value) if value.isdigit() else value
    return table


def test_the_c_opcode_table_lays_arguments_out_as_pickletools() -> None:
    """Every one of the 256 codes: those pickletools knows have the layout of
    its argument descriptor (GLOBAL and INST two lines), the others none."""
    expected: dict[int, int | str] = {}
    for op in pickletools.opcodes:
        code = ord(op.code.encode("latin-1"))
        if op.arg is None:
            expected[code] = 0
        elif op.name in ("GLOBAL", "INST"):
            expected[code] = "ARG_LINE2"
        else:
            expected[code] = op.arg.n if op.arg.n >= 0 else _LAYOUT[op.arg.n]
    table = _c_opcode_args()
    assert {c: table.get(c) for c in range(256)} == {c: expected.get(c) for c in range(256)}
