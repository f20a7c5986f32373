"""Properties 7 and 8: errors that point, and bad input to ``loads``."""

from __future__ import annotations

import contextlib
import io
import pickle
import socket
import sys
import threading
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphpickle


class Task:
    __slots__ = ("args", "func", "key")

    def __init__(self, key, func, args):
        self.key, self.func, self.args = key, func, args

    def __reduce__(self):
        return (Task, (self.key, self.func, self.args))


class Job:
    def __init__(self, conn):
        self.name = "job"
        self.conn = conn


def test_path_through_dicts_tuples_and_reduce_args():
    lock = threading.Lock()
    graph = {"tasks": {("x", 3): Task(("x", 3), len, (1, lock))}}
    with pytest.raises(graphpickle.PicklingError) as info:
        graphpickle.dumps(graph)
    err = info.value
    assert err.path == "root['tasks'][('x', 3)].args[1]"
    assert err.type_name == "_thread.lock"
    assert "root['tasks'][('x', 3)].args[1]" in str(err)
    assert "'_thread.lock'" in str(err)
    assert isinstance(err.__cause__, TypeError)
    assert isinstance(err, pickle.PicklingError)


def test_path_through_attributes_lists_and_closures():
    sock = socket.socket()
    try:
        graph = [0, {"job": Job(sock)}]
        with pytest.raises(graphpickle.PicklingError) as info:
            graphpickle.dumps(graph)
        assert info.value.path == "root[1]['job'].conn"
        assert info.value.type_name == "socket.socket"

        def uses_socket():
            return sock.fileno()

        with pytest.raises(graphpickle.PicklingError) as info:
            graphpickle.dumps({"f": uses_socket})
        assert info.value.path.startswith("root['f']")
        assert "__closure__" in info.value.path and info.value.path.endswith(".cell_contents")
    finally:
        sock.close()


def test_path_through_function_globals():
    global UNPICKLABLE_GLOBAL
    UNPICKLABLE_GLOBAL = threading.Lock()

    def reads_global():
        return UNPICKLABLE_GLOBAL

    with pytest.raises(graphpickle.PicklingError) as info:
        graphpickle.dumps([reads_global])
    assert info.value.path == "root[0].__globals__['UNPICKLABLE_GLOBAL']"


def test_reduce_args_not_held_as_attributes_are_numbered():
    class Opaque:
        def __reduce__(self):
            return (Opaque, ("x", [threading.Lock()]))

    with pytest.raises(graphpickle.PicklingError) as info:
        graphpickle.dumps([Opaque()])
    assert info.value.path == "root[0]<arg 1>[0]"


def test_error_from_a_custom_reduce_is_located_and_chained():
    class Refuses:
        def __reduce__(self):
            raise ValueError("no way")

    with pytest.raises(graphpickle.PicklingError, match="no way") as info:
        graphpickle.dumps({"a": [1, 2, Refuses()]})
    assert info.value.path == "root['a'][2]"
    assert isinstance(info.value.__cause__, ValueError)


def test_dict_keys_are_located():
    lock = threading.Lock()
    with pytest.raises(graphpickle.PicklingError) as info:
        graphpickle.dumps({"outer": {Task("k", len, ()): 1, ("ok",): 2, lock: 3}})
    assert info.value.path.startswith("root['outer']<key <unlocked _thread.lock")


def test_dump_to_file_reports_too():
    with pytest.raises(graphpickle.PicklingError) as info:
        graphpickle.dump([threading.Lock()], io.BytesIO())
    assert info.value.path == "root[0]"


def test_too_deep_recursion_is_a_clear_error():
    deep: list = []
    for _ in range(sys.getrecursionlimit() * 3):
        deep = [deep]
    with pytest.raises(graphpickle.PicklingError, match="recursion limit"):
        graphpickle.dumps(deep)

    class Node:
        def __init__(self, nxt):
            self.nxt = nxt

    chain = None
    for _ in range(sys.getrecursionlimit() * 3):
        chain = Node(chain)
    with pytest.raises(graphpickle.PicklingError, match="recursion limit"):
        graphpickle.dumps(chain)


def test_unreachable_failure_still_reported():
    # A failure the locator cannot reproduce (the object only fails once).
    class FailsOnce:
        calls = 0

        def __reduce__(self):
            FailsOnce.calls += 1
            if FailsOnce.calls == 1:
                raise RuntimeError("transient")
            return (int, ())

    with pytest.raises(graphpickle.PicklingError, match="transient") as info:
        graphpickle.dumps([FailsOnce()])
    assert info.value.path is None


# --- loads -------------------------------------------------------------------

VALID = graphpickle.dumps({"a": [1, 2.5, "x", b"y"], "f": lambda x: x, "s": {1, 2}})


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"", "truncated or empty"),
        (VALID[: len(VALID) // 2], "truncated"),
        (b"not a pickle at all", "corrupted or is not a pickle"),
        (b"\x80\x05\x95\xff\xff\xff\xff\xff\xff\xff\x7f", "corrupted"),  # huge frame length
        (pickle.dumps(1)[:-1] + b"\xff", "corrupted"),
    ],
)
def test_bad_input_raises_unpickling_error(data, fragment):
    with pytest.raises(graphpickle.UnpicklingError, match=fragment) as info:
        graphpickle.loads(data)
    assert isinstance(info.value, pickle.UnpicklingError)
    assert info.value.__cause__ is not None


def test_missing_module_names_it(monkeypatch):
    module = types.ModuleType("gp_vanishing_module")
    exec("def f():\n    pass", module.__dict__)
    monkeypatch.setitem(sys.modules, "gp_vanishing_module", module)
    data = graphpickle.dumps(module.f)  # by reference: importable here
    monkeypatch.delitem(sys.modules, "gp_vanishing_module")
    with pytest.raises(graphpickle.UnpicklingError, match="'gp_vanishing_module'"):
        graphpickle.loads(data)


def test_load_from_file():
    assert graphpickle.load(io.BytesIO(graphpickle.dumps([1, 2])))[1] == 2
    with pytest.raises(graphpickle.UnpicklingError):
        graphpickle.load(io.BytesIO(b"\x80\x05garbage"))


def test_loads_rejects_str_with_type_error():
    with pytest.raises(TypeError, match="bytes"):
        graphpickle.loads("a string")  # type: ignore[arg-type]


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    buf = bytearray(data)
    for pos, value in edits:
        buf[pos % len(buf)] = value
    return bytes(buf[: max(1, len(buf) - cut)])


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 50),
)
def test_fuzz_mutated_payloads_raise_only_graphpickle_errors(edits, cut):
    data = _mutate(VALID, edits, cut)
    with contextlib.suppress(graphpickle.UnpicklingError):
        graphpickle.loads(data)


@settings(max_examples=2000, deadline=None)
@given(data=st.binary(max_size=200))
def test_fuzz_random_bytes_raise_only_graphpickle_errors(data):
    with contextlib.suppress(graphpickle.UnpicklingError):
        graphpickle.loads(data)


def test_raised_recursion_limit_never_crashes(tmp_path):
    # With a raised limit the C pickler would run off the C stack (a segfault,
    # with plain pickle too); graphpickle pickles on a stack sized for the limit.
    from conftest import run_python

    out = run_python(
        """
        import sys, graphpickle

        class Node:
            def __init__(self, nxt):
                self.nxt = nxt

        def chain(n):
            node = None
            for _ in range(n):
                node = Node(node)
            return node

        sys.setrecursionlimit(1_000_000)
        deep = []
        for _ in range(200_000):
            deep = [deep]
        assert graphpickle.loads(graphpickle.dumps(deep)) is not None
        assert graphpickle.loads(graphpickle.dumps(chain(100_000))).nxt.nxt is not None
        print("deep ok")

        sys.setrecursionlimit(50_000)
        try:
            graphpickle.dumps(chain(100_000))
        except graphpickle.PicklingError as exc:
            assert "recursion limit" in str(exc)
            print("clear error")
        """,
        cwd=tmp_path,
    )
    assert out.split("\n")[:2] == ["deep ok", "clear error"]
