"""Properties 7 and 8: errors that point, and bad input to ``loads``."""

from __future__ import annotations

import io
import pickle
import pickletools
import re
import socket
import sys
import threading
import traceback
import types

import pytest
from conftest import asks_for_a_huge_memo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle.core import overrun as _overrun


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


def where(exc: BaseException) -> str | None:
    """The path graphpickle attached to an exception from dumps()."""
    return exc.graphpickle_path  # type: ignore[attr-defined]


def test_reduction_errors_keep_their_type_and_message_and_gain_the_path():
    lock = threading.Lock()
    graph = {"tasks": {("x", 3): Task(("x", 3), len, (1, lock))}}
    with pytest.raises(TypeError) as info:
        graphpickle.dumps(graph)
    err = info.value
    assert type(err) is TypeError  # what pickle.dumps and cloudpickle.dumps raise
    assert str(err) == "cannot pickle '_thread.lock' object"
    assert where(err) == "root['tasks'][('x', 3)].args[1]"
    assert err.graphpickle_type_name == "_thread.lock"
    note, advice = err.__notes__
    assert note.startswith(
        "when pickling the '_thread.lock' object at root['tasks'][('x', 3)].args[1]: <"
    )
    # (_thread.lock is the type's own name from 3.13, _thread.LockType before)
    assert re.search(r"graphpickle\.register_reducer\(_thread\.(lock|LockType), reducer\)", advice)
    # What a traceback prints: the message, then the notes.
    printed = "".join(traceback.format_exception(err))
    assert (
        "TypeError: cannot pickle '_thread.lock' object\nwhen pickling the '_thread.lock'"
        in printed
    )


class RaisesNope:
    def __reduce__(self):
        raise TypeError("nope")


class HoldsNope:
    def __init__(self):
        self.inner = RaisesNope()


@pytest.mark.parametrize(
    "graph, path",
    [(RaisesNope(), "root"), ([1, RaisesNope()], "root[1]"), (HoldsNope(), "root.inner")],
)
def test_the_exception_a_reduce_raises_is_what_the_caller_catches(graph, path):
    # distributed's contract for its dumps, and pickle's: the object's own exception.
    with pytest.raises(TypeError, match="nope") as info:
        graphpickle.dumps(graph)
    assert str(info.value) == "nope" and where(info.value) == path
    with pytest.raises(TypeError, match="nope"):
        graphpickle.dump(graph, io.BytesIO())


def test_multiprocessing_lock_is_a_runtime_error_as_with_cloudpickle():
    import multiprocessing

    with pytest.raises(RuntimeError, match="only be shared between processes through inheritance"):
        graphpickle.dumps({"lock": multiprocessing.Lock()})


def test_pickle_errors_from_the_c_pickler_keep_their_type():
    class BadReduce:
        def __reduce__(self):
            return (BadReduce,)  # a 1-tuple: the C pickler refuses it

    for dumps in (pickle.dumps, graphpickle.dumps):
        with pytest.raises(pickle.PicklingError) as info:
            dumps([BadReduce()])
        assert not isinstance(info.value, graphpickle.PicklingError)
    assert where(info.value) == "root[0]"


def test_an_exception_raised_again_keeps_one_set_of_notes():
    shared = ValueError("cached")

    class Raises:
        def __reduce__(self):
            raise shared

    for path in ("root[0]", "root['x']"):
        graph = [Raises()] if path == "root[0]" else {"x": Raises()}
        with pytest.raises(ValueError) as info:
            graphpickle.dumps(graph)
        assert info.value is shared and where(shared) == path
        assert len(shared.__notes__) == 2 and path in shared.__notes__[0]


def test_notes_added_by_the_object_itself_are_kept():
    class Explains:
        def __reduce__(self):
            exc = TypeError("no")
            exc.add_note("the object's own note")
            raise exc

    with pytest.raises(TypeError) as info:
        graphpickle.dumps([Explains()])
    assert info.value.__notes__[0] == "the object's own note"
    assert "root[0]" in info.value.__notes__[1]


def test_own_refusals_are_graphpickle_pickling_errors_with_the_path():
    import numpy as np

    structured = memoryview(np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]))
    with pytest.raises(graphpickle.PicklingError, match="memoryview of format") as info:
        graphpickle.dumps({"ok": memoryview(b"ab"), "bad": [structured]})
    assert info.value.path == "root['bad'][0]" == where(info.value)
    assert "at root['bad'][0]" in str(info.value)
    assert isinstance(info.value, pickle.PicklingError)


def test_a_failed_pickler_freed_by_the_cycle_collector_does_not_crash(tmp_path):
    # The exception's traceback holds the pickler: once in a garbage cycle, the
    # collector used to free its memo's memoryviews in an order that crashes 3.11.
    from conftest import run_python

    out = run_python(
        """
        import gc, graphpickle, numpy as np

        def fail():
            structured = memoryview(np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]))
            try:
                graphpickle.dumps({"ok": memoryview(b"ab"), "bad": [structured]})
            except graphpickle.PicklingError as exc:
                return exc

        kept = [fail() for _ in range(50)]
        del kept
        gc.collect()
        print("collected")
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "collected"


def test_path_through_attributes_lists_and_closures():
    sock = socket.socket()
    try:
        graph = [0, {"job": Job(sock)}]
        with pytest.raises(TypeError) as info:
            graphpickle.dumps(graph)
        assert where(info.value) == "root[1]['job'].conn"
        assert info.value.graphpickle_type_name == "socket.socket"

        def uses_socket():
            return sock.fileno()

        with pytest.raises(TypeError) as info:
            graphpickle.dumps({"f": uses_socket})
        path = where(info.value)
        assert path.startswith("root['f']")
        assert "__closure__" in path and path.endswith(".cell_contents")
    finally:
        sock.close()


def test_path_through_function_globals():
    global UNPICKLABLE_GLOBAL
    UNPICKLABLE_GLOBAL = threading.Lock()

    def reads_global():
        return UNPICKLABLE_GLOBAL

    with pytest.raises(TypeError) as info:
        graphpickle.dumps([reads_global])
    assert where(info.value) == "root[0].__globals__['UNPICKLABLE_GLOBAL']"


def test_reduce_args_not_held_as_attributes_are_numbered():
    class Opaque:
        def __reduce__(self):
            return (Opaque, ("x", [threading.Lock()]))

    with pytest.raises(TypeError) as info:
        graphpickle.dumps([Opaque()])
    assert where(info.value) == "root[0]<arg 1>[0]"


def test_dict_keys_are_located():
    lock = threading.Lock()
    with pytest.raises(TypeError) as info:
        graphpickle.dumps({"outer": {Task("k", len, ()): 1, ("ok",): 2, lock: 3}})
    assert where(info.value).startswith("root['outer']<key <unlocked _thread.lock")


def test_dump_to_file_reports_too():
    with pytest.raises(TypeError) as info:
        graphpickle.dump([threading.Lock()], io.BytesIO())
    assert where(info.value) == "root[0]"


def _nested_lists(depth: int) -> list:
    deep: list = []
    for _ in range(depth):
        deep = [deep]
    return deep


class Node:
    def __init__(self, nxt):
        self.nxt = nxt


def _chain(depth: int) -> Node | None:
    chain = None
    for _ in range(depth):
        chain = Node(chain)
    return chain


# Too deep for the C pickler: from 3.14 it goes as deep as the C stack allows
# (20,000-30,000 nested lists pickle there).
TOO_DEEP = 300_000 if sys.version_info >= (3, 14) else 30_000


@pytest.mark.parametrize(
    "graph, segment", [(_nested_lists(TOO_DEEP), "[0]"), (_chain(TOO_DEEP), ".nxt")]
)
def test_too_deep_recursion_is_cloudpickles_error_with_the_deepest_path(graph, segment):
    with pytest.raises(pickle.PicklingError, match="excessively deep recursion required") as info:
        graphpickle.dumps(graph)
    err = info.value
    assert isinstance(err, graphpickle.PicklingError)
    assert isinstance(err.__cause__, RecursionError)
    assert err.path is not None and err.path.endswith(segment * 5)
    assert "levels deep" in str(err) and "flatten long chains" in str(err)
    # sys.setrecursionlimit() governs the C pickler up to 3.11 only; from 3.14
    # the thread's C stack does.
    assert ("sys.setrecursionlimit()" in str(err)) == (sys.version_info < (3, 12))
    assert ("threading.stack_size()" in str(err)) == (sys.version_info >= (3, 14))


def test_a_reduce_that_recurses_without_end_is_named():
    class Endless:
        def __reduce__(self):
            return self.__reduce__()

    with pytest.raises(pickle.PicklingError, match="deep recursion") as info:
        graphpickle.dumps({"e": Endless()})
    assert info.value.path == "root['e']"
    assert "RecursionError" in str(info.value)


def test_unreachable_failure_still_reported():
    # A failure the locator cannot reproduce (the object only fails once).
    class FailsOnce:
        calls = 0

        def __reduce__(self):
            FailsOnce.calls += 1
            if FailsOnce.calls == 1:
                raise RuntimeError("transient")
            return (int, ())

    with pytest.raises(RuntimeError) as info:
        graphpickle.dumps([FailsOnce()])
    assert str(info.value) == "transient"
    assert where(info.value) is None
    if sys.version_info >= (3, 14):  # CPython's own notes say where, and stand alone
        assert info.value.__notes__ == ["when serializing list item 0"]
    else:
        assert "could not be located" in info.value.__notes__[0]


def test_deterministic_mode_and_explain_report_the_same_way():
    for call in (
        lambda graph: graphpickle.dumps(graph, deterministic=True),
        graphpickle.explain,
        graphpickle.fingerprint,
    ):
        with pytest.raises(TypeError, match=r"_thread\.lock") as info:
            call({"k": [{"a", "b"}, threading.Lock()]})
        assert where(info.value) == "root['k'][1]"


# --- loads -------------------------------------------------------------------

VALID = graphpickle.dumps({"a": [1, 2.5, "x", b"y"], "f": lambda x: x, "s": {1, 2}})


def _code_arguments(data: bytes) -> tuple[int, int]:
    """Where the lambda's CodeType arguments lie in ``data`` (MARK to TUPLE)."""
    ops = list(pickletools.genops(data))
    at = next(i for i, (op, arg, _) in enumerate(ops) if arg == "CodeType")
    start = next(pos for op, _, pos in ops[at:] if op.name == "MARK")
    end = next(pos for op, _, pos in ops[at:] if op.name == "TUPLE")
    return start, end


# CodeType trusts its bytes: CPython crashes on some bytecode and line tables
# (3.13.0 segfaulted in CI on an opcode 0xfe and a changed line table), with plain
# pickle as with graphpickle. Loading code is trusting its sender (README,
# Limits); the fuzz below leaves those bytes as they are.
CODE_ARGUMENTS = _code_arguments(VALID)


def _outcome(load, data: bytes) -> tuple[type[BaseException] | None, str]:
    try:
        load(data)
    except Exception as exc:
        return type(exc), str(exc)
    return None, ""


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
def test_bad_input_raises_what_pickle_raises_with_a_note(data, fragment):
    expected = _outcome(pickle.loads, data)
    assert expected[0] is not None
    with pytest.raises(expected[0]) as info:
        graphpickle.loads(data)
    assert (type(info.value), str(info.value)) == expected  # EOFError, UnpicklingError, ...
    assert fragment in info.value.__notes__[-1]
    with pytest.raises(expected[0]):
        graphpickle.load(io.BytesIO(data))


def test_a_read_loop_ends_on_eof_error_as_with_pickle():
    stream = io.BytesIO(graphpickle.dumps(1) + graphpickle.dumps({"two": 2}))
    loaded = []
    while True:
        try:
            loaded.append(graphpickle.load(stream))
        except EOFError:
            break
    assert loaded == [1, {"two": 2}]


def test_python2_payloads_load_with_pickles_arguments():
    # A Python 2 str pickled with protocol 2 (as pickle's own tests write it).
    data = b"\x80\x02U\x04caf\xe9q\x00."
    assert graphpickle.loads(data, encoding="latin1") == pickle.loads(data, encoding="latin1")
    assert graphpickle.loads(data, encoding="bytes") == b"caf\xe9"
    assert graphpickle.load(io.BytesIO(data), encoding="latin1") == "caf\xe9"
    with pytest.raises(UnicodeDecodeError):
        graphpickle.loads(data)  # ASCII by default, as pickle
    assert graphpickle.loads(data, encoding="latin1", allowed=graphpickle.DATA_ONLY) == "caf\xe9"


def test_missing_module_names_it(monkeypatch):
    module = types.ModuleType("gp_vanishing_module")
    exec("def f():\n    pass", module.__dict__)
    monkeypatch.setitem(sys.modules, "gp_vanishing_module", module)
    data = graphpickle.dumps(module.f)  # by reference: importable here
    monkeypatch.delitem(sys.modules, "gp_vanishing_module")
    with pytest.raises(ModuleNotFoundError) as info:
        graphpickle.loads(data)
    assert "'gp_vanishing_module', which this interpreter cannot import" in info.value.__notes__[-1]


class _ExtensionRefuses:
    """Rebuilt by raising what an extension that refuses to load raises: an
    ImportError that names no module (numpy in a subinterpreter)."""

    def __reduce__(self):
        return (_refuse_import, ("module does not support loading in subinterpreters",))


def _refuse_import(message):
    raise ImportError(message)


def test_an_import_error_without_a_module_name_is_quoted_not_named_none():
    data = graphpickle.dumps(_ExtensionRefuses())
    with pytest.raises(ImportError) as info:
        graphpickle.loads(data)
    note = info.value.__notes__[-1]
    assert "module None" not in note
    assert "does not support loading in subinterpreters" in note


def test_load_from_file():
    assert graphpickle.load(io.BytesIO(graphpickle.dumps([1, 2])))[1] == 2
    with pytest.raises(pickle.UnpicklingError):
        graphpickle.load(io.BytesIO(b"\x80\x05garbage"))


def test_loads_rejects_str_with_type_error():
    with pytest.raises(TypeError, match="bytes"):
        graphpickle.loads("a string")  # type: ignore[arg-type]


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    buf = bytearray(data)
    for pos, value in edits:
        buf[pos % len(buf)] = value
    return bytes(buf[: max(1, len(buf) - cut)])


def _same_outcome_as_pickle(data: bytes) -> None:
    if asks_for_a_huge_memo(data):
        return  # both would allocate gigabytes (see conftest)
    start, end = CODE_ARGUMENTS
    if data[start:end] != VALID[start:end] and len(data) >= end:
        return  # a code object built from changed bytes (see CODE_ARGUMENTS)
    # pickle.loads may crash on an overlong BYTEARRAY8 (see test_overrun.py):
    # graphpickle says what pickle says when that allocation succeeds. (3.15's
    # unpickler is safe there: its own outcome is expected.)
    if _overrun.NEEDED and _overrun._bytearray8_overruns_in_python(data):
        expected = (pickle.UnpicklingError, "pickle data was truncated")
    else:
        expected = _outcome(pickle.loads, data)
    try:
        graphpickle.loads(data)
    except Exception as exc:
        assert (type(exc), str(exc)) == expected
        assert exc.__notes__[-1].startswith("graphpickle: cannot load the pickle: ")
    else:
        assert expected[0] is None


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 50),
)
def test_fuzz_mutated_payloads_fail_as_pickle_fails(edits, cut):
    _same_outcome_as_pickle(_mutate(VALID, edits, cut))


@settings(max_examples=2000, deadline=None)
@given(data=st.binary(max_size=200))
def test_fuzz_random_bytes_fail_as_pickle_fails(data):
    _same_outcome_as_pickle(data)


def test_raised_recursion_limit_never_crashes(tmp_path):
    # Up to 3.11, with a raised limit the C pickler would run off the C stack (a
    # segfault, with plain pickle too); graphpickle pickles on a stack sized for
    # the limit, so these deep graphs pickle. From 3.12 the C pickler stops at
    # the C recursion limit (fixed when the interpreter is built: ~750 nested
    # lists and ~500 objects on 3.12, 5000 and 3333 on 3.13) whatever
    # sys.setrecursionlimit() says: the same graphs are a clear error, never a
    # crash, as with plain pickle.
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

        def outcome(graph):
            try:
                data = graphpickle.dumps(graph)
            except graphpickle.PicklingError as exc:
                assert "deep recursion" in str(exc), exc
                return "clear error"
            assert graphpickle.loads(data) is not None
            return "deep ok"

        sys.setrecursionlimit(1_000_000)
        deep = []
        for _ in range(200_000):
            deep = [deep]
        print(outcome(deep))
        print(outcome(chain(100_000)))
        sys.setrecursionlimit(50_000)
        print(outcome(chain(100_000)))
        """,
        cwd=tmp_path,
    )
    if sys.version_info >= (3, 12):
        expected = ["clear error", "clear error", "clear error"]
    else:
        expected = ["deep ok", "deep ok", "clear error"]
    assert out.splitlines() == expected


def test_the_advice_runs_as_written():
    # The advice names the type by an attribute of its module that holds it.
    with pytest.raises(TypeError) as info:
        graphpickle.dumps({"a": threading.Lock()})
    advice = info.value.__notes__[-1].split("give its type a reducer: ", 1)[1]
    namespace = {"graphpickle": graphpickle, "reducer": lambda lock: (threading.Lock, ())}
    exec(f"import {advice.split('(')[1].split('.')[0]}\n{advice}", namespace)
    try:
        assert isinstance(pickle.loads(graphpickle.dumps(threading.Lock())), type(threading.Lock()))
    finally:
        graphpickle.unregister_reducer(type(threading.Lock()))
