"""Code blocks (graphpickle.core.blocks): what the dask integration sends a
worker that said it loads them. A payload with blocks must load, in a fresh
receiver, as cloudpickle's payload of the same objects does; the receiver keeps
nothing but code objects, keyed by their bytes."""

from __future__ import annotations

import json
import marshal
import pickle
import pickletools
import threading

import pytest
from conftest import run_python
from test_cache_soundness import BLOCKS, assert_as_cloudpickle, exchange

import graphpickle.integrations.dask_distributed as gpd
from graphpickle._switches import CACHING
from graphpickle.core import blocks
from graphpickle.errors import UnpicklingError

# Functions of every shape a notebook has, sent as a task's parts would be.
SHAPES = """
import math
COUNT = 0
SHARED = [1]
def plain(x):
    return x + 1
def uses_globals(x):
    global COUNT
    COUNT += 1
    return (x, COUNT, math.floor(2.5), len(SHARED))
def reads_count():
    return COUNT
def defaults(x, y=(1, 2), *, k="k"):
    "A docstring."
    return (x, y, k)
def annotated(x: int) -> "float":
    return float(x)
annotated.tag = ["attribute"]
def make(offset):
    def add(x):
        return x + offset
    return add
add = make(10)
lam = lambda x, *a: x * 2
def recursive(n):
    return 1 if n < 2 else n * recursive(n - 1)
parts = [plain, uses_globals, reads_count, defaults, annotated, add, lam, recursive, SHARED]
send("first", parts)
send("again", parts)
blocked = to_a_worker_that_loads_blocks(parts)
if not os.environ.get("GRAPHPICKLE_NO_CACHE"):  # (else no function is remembered)
    assert blocked.count(b"graphpickle.core.blocks") == 1, "no code blocks were sent"
    assert b"\\x8c\\rmake_function" in blocked and b"load_code" in blocked
"""

OBSERVE = """
def observe(parts):
    plain, uses, reads, defaults, annotated, add, lam, recursive, shared = parts
    shared.append(2)
    return (plain(1), uses(2), reads(), uses.__globals__ is reads.__globals__,
            defaults(0), defaults.__doc__, defaults.__kwdefaults__, annotated.__annotations__,
            annotated.tag, add(1), add.__closure__[0].cell_contents, lam(3), recursive(5),
            uses.__globals__["SHARED"] is shared, plain.__code__.co_filename,
            plain.__qualname__, plain.__module__, sorted(uses.__globals__))
"""


def test_blocks_load_in_a_fresh_receiver_as_cloudpickle_payloads(tmp_path):
    seen = exchange(tmp_path, SHAPES, OBSERVE)
    assert [label for label, _ in seen] == ["first", "again"]
    assert_as_cloudpickle(seen)
    assert all(not row[i].startswith("raised") for _, row in seen for i in BLOCKS)


def _block_payload(func):
    token = gpd._CODE_BLOCKS.set(True)
    try:
        gpd.dumps(func)  # remembered
        return gpd.dumps(func)
    finally:
        gpd._CODE_BLOCKS.reset(token)


def _named(payload: bytes) -> set[str]:
    """The globals a payload names (protocol 4+: two strings, then STACK_GLOBAL)."""
    stack: list[object] = []
    memo: list[object] = []
    named = set()
    for opcode, arg, _ in pickletools.genops(payload):
        if opcode.name == "MEMOIZE":
            memo.append(stack[-1] if stack else None)
        elif opcode.name in ("BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif opcode.name == "STACK_GLOBAL":
            named.add(f"{stack[-2]}.{stack[-1]}")
            stack.append(None)
        else:
            stack.append(arg)
    return named


def _local_function():
    state = {"calls": 0}

    def counted(x=(1,)):
        state["calls"] += 1
        return x

    return counted


# What a remembered function's block does (GRAPHPICKLE_NO_CACHE=1 remembers none).
needs_remembering = pytest.mark.skipif(not CACHING, reason="no function is remembered")


@needs_remembering
def test_each_load_makes_a_new_function_around_one_kept_code_object():
    payload = _block_payload(_local_function())
    assert _named(payload) >= {
        "graphpickle.core.blocks.make_function",
        "graphpickle.core.blocks.load_code",
    }
    first, second = pickle.loads(payload), pickle.loads(payload)
    assert first is not second and first.__code__ is second.__code__
    assert first.__closure__[0].cell_contents is not second.__closure__[0].cell_contents
    first()
    first.__defaults__ = (2,)
    first.attribute = "set"
    assert second() == (1,) and not hasattr(second, "attribute")
    assert second.__closure__[0].cell_contents == {"calls": 1}


@needs_remembering
def test_loads_from_many_threads_are_independent():
    payload = _block_payload(_local_function())
    made: list[object] = []
    lock = threading.Lock()

    def load_and_change():
        for _ in range(200):
            func = pickle.loads(payload)
            func()
            func.__defaults__ = ("changed",)
            with lock:
                made.append(func)

    threads = [threading.Thread(target=load_and_change) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(f) for f in made}) == len(made) == 800
    assert len({id(f.__code__) for f in made}) == 1
    assert {f.__closure__[0].cell_contents["calls"] for f in made} == {1}
    assert pickle.loads(payload)() == (1,)


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (marshal.dumps(["not", "code"]), "holds a list, not code"),
        (marshal.dumps(plain_code := compile("1", "<x>", "eval"))[:-3], "corrupted"),
        (bytearray(marshal.dumps(plain_code)), "bytes, not bytearray"),
        (b"\x00" * (blocks.MAX_BLOCK + 1), "over"),
    ],
)
def test_a_code_block_that_is_not_one_is_refused(block, match):
    with pytest.raises(UnpicklingError, match=match):
        blocks.load_code(block)


def test_a_function_of_an_unknown_layout_is_refused():
    code = compile("1", "<x>", "exec")
    with pytest.raises(UnpicklingError, match="no function layout 7"):
        blocks.make_function(code, {}, None, 7, {})
    with pytest.raises(UnpicklingError, match="has 10 slots, not 2"):
        blocks.make_function(code, {}, None, 0, {}, "a", "b")


def test_the_cache_switch_keeps_no_code(tmp_path):
    out = run_python(
        """
        import pickle
        import graphpickle.integrations.dask_distributed as gpd
        from graphpickle.core import blocks
        def f():
            return 1
        token = gpd._CODE_BLOCKS.set(True)
        payloads = [gpd.dumps(f) for _ in range(3)]
        assert all(b"\\x8c\\rmake_function" not in p for p in payloads)  # nothing remembered
        code = compile("1", "<x>", "eval")
        import marshal
        first = blocks.load_code(marshal.dumps(code))
        assert blocks.load_code(marshal.dumps(code)) is not first and not blocks._kept
        print("ok")
        """,
        cwd=tmp_path,
        env={"GRAPHPICKLE_NO_CACHE": "1"},
    )
    assert out.split()[-1] == "ok"


@pytest.mark.skipif(blocks._speedups is None, reason="the C module is not built")
def test_the_c_make_function_is_the_python_one():
    from test_cloudpickle_internals import _functions_of_every_shape

    from graphpickle import _cloudpickle_internals as internals

    assert blocks.make_function is not blocks.make_function_in_python
    for func in _functions_of_every_shape():
        holder = type("Holder", (), {"globals_ref": {}})()
        _, (code, base, _, _, closure), state, _, _, _ = internals.reduce_function_by_value(
            holder, func
        )
        made = [
            make(code, dict(base), closure, *blocks.flat_state((dict(state[0]), dict(state[1]))))
            for make in (blocks.make_function, blocks.make_function_in_python)
        ]
        _assert_made_alike(*made, func)
    # Anything else goes to the Python function, which says what is wrong.
    with pytest.raises(UnpicklingError, match="no function layout"):
        blocks.make_function(compile("1", "<x>", "exec"), {}, None, "0", {})
    with pytest.raises(TypeError):
        blocks.make_function(compile("1", "<x>", "exec"), {}, "not a closure", 0, {}, *[None] * 10)


class _KeysSubset(dict):
    """A dict that another dict's ``update`` reads through ``keys()`` (its
    iteration is not dict's): the generic path of ``dict.update``."""

    def keys(self):
        return [key for key in dict.keys(self) if key != "hidden"]

    def __iter__(self):
        return iter(self.keys())


@pytest.mark.skipif(blocks._speedups is None, reason="the C module is not built")
def test_the_c_make_function_updates_as_the_method_does_for_other_mappings():
    # An exact dict updated from an exact dict is PyDict_Update in C; anything
    # else calls the method, which reads keys() of a dict subclass.
    def func():
        return 1

    code = func.__code__
    base = {"__name__": __name__}
    for make in (blocks.make_function, blocks.make_function_in_python):
        globals_slot = _KeysSubset(seen=1, hidden=2)
        made = make(
            code, dict(base), None, 0, _KeysSubset(tag=1, hidden=2), "func", "func", {}, None,
            None, __name__, None, None, [], globals_slot,
        )  # fmt: skip
        assert "seen" in made.__globals__ and "hidden" not in made.__globals__, make
        assert made.__dict__ == {"tag": 1}, make


def _function_block_call(func, receiver):
    """(digest, *parts) of ``func``'s function block, which ``receiver`` holds."""
    from graphpickle import _cloudpickle_internals as internals
    from graphpickle.core import connection

    holder = type("Holder", (), {"globals_ref": {}})()
    _, (code, base, _, _, closure), state, _, _, _ = internals.reduce_function_by_value(
        holder, func
    )
    flat = blocks.flat_state((dict(state[0]), dict(state[1])))
    block = blocks.function_block(blocks.code_block(code), flat, blocks.held_items(base))
    assert block is not None, func
    receiver.keep(block, blocks._read_function_block(block))
    return (connection.digest(block), dict(base), closure, *blocks.sent_slots(flat))


@pytest.mark.skipif(blocks._speedups is None, reason="the C module is not built")
def test_the_c_function_ref_is_the_python_one():
    from test_cloudpickle_internals import _functions_of_every_shape

    from graphpickle.core import connection

    assert blocks.function_ref is not blocks.function_ref_in_python
    receiver = connection.Receiver()
    token = connection.RECEIVER.set(receiver)
    try:
        for func in _functions_of_every_shape():
            digest, base, *parts = _function_block_call(func, receiver)
            made = [
                ref(digest, dict(base), *parts)
                for ref in (blocks.function_ref, blocks.function_ref_in_python)
            ]
            _assert_made_alike(*made, func)
            # The digest alone: the payload's base-globals dict, a new one each time.
            alone = [ref(digest) for ref in (blocks.function_ref, blocks.function_ref_in_python)]
            assert alone[0] == alone[1] and type(alone[0]) is dict
            assert blocks.function_ref(digest) is not alone[0]
        # A miss, a digest of a code block, and calls of another shape: the
        # Python function's errors.
        for bad in ((b"\0" * 16,), (b"\0" * 16, *[None] * 9), (digest, None), ("text",)):
            errors = []
            for ref in (blocks.function_ref, blocks.function_ref_in_python):
                with pytest.raises(UnpicklingError) as caught:
                    ref(*bad)
                errors.append(str(caught.value))
            assert errors[0] == errors[1], bad
    finally:
        connection.RECEIVER.reset(token)
    with pytest.raises(UnpicklingError, match="holds no function block"):
        blocks.function_ref(digest)  # no connection is receiving


def test_subimport_imports_through_builtins_and_reads_sys_modules(monkeypatch):
    import builtins
    import sys

    calls = []
    real = builtins.__import__

    def spy(name, *args, **kwargs):
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", spy)
    for subimport in {blocks.subimport, blocks.subimport_in_python}:
        calls.clear()
        assert subimport("os.path") is sys.modules["os.path"]
        assert calls == ["os.path"], subimport
        with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
            subimport("no_such_module_here")
        with pytest.raises(TypeError):
            subimport(3)


def _assert_made_alike(c, python, func):
    """The C module's function and the Python function's, made from the same
    parts of ``func``, hold the same state."""
    for name in (
        "__name__", "__qualname__", "__module__", "__doc__", "__defaults__",
        "__kwdefaults__", "__annotations__", "__dict__", "__code__",
    ):  # fmt: skip
        assert getattr(c, name) == getattr(python, name), (func, name)
    assert c.__globals__ == python.__globals__
    assert [_contents(x) for x in c.__closure__ or ()] == [
        _contents(x) for x in python.__closure__ or ()
    ]


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return "<empty>"


@needs_remembering
def test_inspect_counts_code_blocks_as_code_and_restricted_loading_refuses_them():
    import graphpickle
    from graphpickle.diagnostics import inspect

    payload = _block_payload(lambda x: x + 1)
    for trust in ((), ("graphpickle",)):
        report = inspect(payload, trust=trust)
        assert report.verdict == "code", trust
        (made,) = report.by_value
        assert made.kind == "function" and made.name.endswith("<lambda>"), made
    with pytest.raises(graphpickle.ForbiddenGlobalError, match=r"graphpickle\.core\.blocks"):
        graphpickle.loads(payload, allowed=["dask", "builtins"])
    # A class made by blocks.make_class (a class block) is a class by value.
    token = gpd._CODE_BLOCKS.set(True)
    try:
        payload = gpd.dumps(type("Local", (), {"__module__": "__main__"}))
    finally:
        gpd._CODE_BLOCKS.reset(token)
    assert "graphpickle.core.blocks.make_class" in _named(payload)
    report = inspect(payload, trust=("graphpickle",))
    (made,) = report.by_value
    assert made.kind == "class" and made.name == "Local", made


@needs_remembering
def test_a_worker_keeps_code_objects_within_its_budgets(monkeypatch):
    monkeypatch.setattr(blocks, "_kept", {})
    monkeypatch.setattr(blocks, "_kept_bytes", 0)
    monkeypatch.setattr(blocks, "_MAX_KEPT_BYTES", 3_000)
    made = [marshal.dumps(compile(f"x = {i!r}", "<x>", "exec")) for i in range(100)]
    for block in made:
        blocks.load_code(block)
        assert blocks._kept_bytes == sum(len(b) for b in blocks._kept) <= 3_000
    assert 0 < len(blocks._kept) < 100
    monkeypatch.setattr(blocks, "_MAX_KEPT", 5)
    for block in made:
        blocks.load_code(block)
        assert len(blocks._kept) <= 5


_CLASSES_SENDER = """
import dataclasses, pickle, sys, cloudpickle
import graphpickle.integrations.dask_distributed as gpd

@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.5
    LIMIT = 10
    def norm(self):
        return abs(self.x) + self.y

class Registry:
    made = []
    def __init_subclass__(cls, **kwargs):
        Registry.made.append(cls.__name__)

class Child(Registry):
    LIMIT = 1

class Meta(type):
    pass

class WithMeta(metaclass=Meta):
    LIMIT = 2

objects = [Point(3, 1.5), Child(), WithMeta()]
token = gpd._CODE_BLOCKS.set(True)
blocked = [gpd.dumps(objects), gpd.dumps(objects)]
gpd._CODE_BLOCKS.reset(token)
assert all(b"make_class" in payload for payload in blocked)
theirs = [cloudpickle.dumps(objects), cloudpickle.dumps(objects)]
with open(sys.argv[1], "wb") as out:
    pickle.dump({"blocks": blocked, "cloudpickle": theirs}, out)
"""

_CLASSES_RECEIVER = """
import dataclasses, json, pickle, sys
with open(sys.argv[1], "rb") as f:
    first, second = pickle.load(f)[sys.argv[2]]
a = pickle.loads(first)
for obj in a:
    type(obj).LIMIT = 99  # the receiver changes the classes between loads
type(a[0]).norm = lambda self: "changed"
b = pickle.loads(second)
point, child, with_meta = b
registry = type(child).__mro__[1]
print(json.dumps([
    [type(x) is type(y) for x, y in zip(a, b)],
    [type(x).LIMIT for x in b],
    point.norm(), repr(point), [f.name for f in dataclasses.fields(point)],
    registry.made, type(with_meta).__class__.__name__, a[0] == point,
]))
"""


def test_classes_in_blocks_load_as_cloudpickles_from_the_tracked_class(tmp_path):
    # blocks.make_class looks a tracked class up instead of making a skeleton,
    # when making one could not be seen: the loads must be cloudpickle's, the
    # class state applied again in each, a skeleton made where making it runs
    # code (__init_subclass__, a metaclass).
    payloads = tmp_path / "payloads.pkl"
    run_python(_CLASSES_SENDER, str(payloads), cwd=tmp_path)
    seen = {
        kind: run_python(_CLASSES_RECEIVER, str(payloads), kind, cwd=tmp_path)
        for kind in ("blocks", "cloudpickle")
    }
    assert seen["blocks"] == seen["cloudpickle"]
    same_classes, limits, norm, *_, registry_made, _, _ = json.loads(seen["blocks"])
    assert same_classes == [True, True, True] and limits == [10, 1, 2] and norm == 4.5
    assert registry_made == ["Child", "Child"]  # the sender's list, then the skeleton's append
