"""A task's by-value classes once per connection (graphpickle.core.classes_first):
the pooled dask pickler writes the classes first, then the task, with one
pickler; the classes' part travels once per connection, then as its digest.

What a sequence of such payloads gives a fresh receiver, against cloudpickle's
payloads, is checked by test_connection_classes.py and by the property test of
test_connection.py (its state has a class); these tests pin the frame itself."""

import dataclasses
import json
import pickle
import sys
import types

import pytest
from conftest import run_python
from hypothesis import given, settings
from hypothesis import strategies as st
from test_connection import READ_SCRIPT, WRITE_SCRIPT, read, write

import graphpickle.integrations.dask_distributed as gpd
from graphpickle._switches import CACHING
from graphpickle.core import classes_first, connection
from graphpickle.core.native import speedups
from graphpickle.errors import UnpicklingError

pytestmark = [
    pytest.mark.skipif(not CACHING, reason="GRAPHPICKLE_NO_CACHE=1: nothing is kept"),
    pytest.mark.skipif(speedups is None, reason="the classes go first on the C path only"),
]

_KINDS = {1: "keep", 2: "named", 3: "once"}


def kind(payload: bytes) -> str:
    """How a payload travels: "inline" (a plain pickle), or its frame's kind."""
    return _KINDS[classes_first.split(payload)[0]] if classes_first.is_framed(payload) else "inline"


def module_class(source: str, name: str = "Point") -> type:
    """``name`` from ``source`` run as a ``__main__`` module would (by value)."""
    namespace: dict = {"__name__": "__main__", "__package__": None}
    exec("import dataclasses\n" + source, namespace)
    return namespace[name]


_POINT = "@dataclasses.dataclass\nclass Point:\n    x: int\n    y: float = 0.0\n"


def test_the_classes_part_goes_once_then_by_its_digest():
    point = module_class(_POINT)
    sender, receiver = connection.Sender(), connection.Receiver()
    payloads = [write(sender, [point(i), i]) for i in range(4)]
    # The first part names the methods' blocks once; from the second on they are
    # the connection's, so the part is other bytes, kept once, then named.
    assert [kind(p) for p in payloads] == ["keep", "keep", "named", "named"]
    assert len(payloads[3]) < len(payloads[1]) // 4
    loaded = [read(receiver, p) for p in payloads]
    assert loaded == [[point(i), i] for i in range(4)]
    assert len({type(v[0]) for v in loaded}) == 1  # one class, as cloudpickle's tracker gives


def test_without_a_connection_a_class_goes_inline():
    point = module_class(_POINT)
    assert kind(gpd.dumps(point(1))) == "inline"
    token = gpd._CODE_BLOCKS.set(True)  # (a receiver that loads blocks but keeps none)
    try:
        assert kind(gpd.dumps(point(1))) == "inline"
    finally:
        gpd._CODE_BLOCKS.reset(token)


def test_a_reference_to_a_part_this_connection_never_sent_fails_that_task_only():
    Task = pytest.importorskip(
        "dask._task_spec", reason="run specs are dask._task_spec objects"
    ).Task

    point = module_class(_POINT)
    sender = connection.Sender()
    first, _ = (write(sender, Task(("t", i), repr, point(i))) for i in range(2))
    named = write(sender, Task(("t", 2), repr, point(2)))
    assert kind(named) == "named"
    # Another connection (or this one after its part was evicted) holds nothing.
    task = read(connection.Receiver(), named)
    name = classes_first.split(named)[1].hex()
    with pytest.raises(UnpicklingError, match=f"holds no classes block {name}"):
        task()
    # The same bytes made into a part of another kind are refused, not guessed.
    forged = bytes((classes_first.MARKER, 9)) + named[2:]
    with pytest.raises(UnpicklingError, match="unknown kind 9"):
        gpd.loads(forged)
    # A length past the end is refused too.
    with pytest.raises(UnpicklingError, match="shorter than its header"):
        gpd.loads(first[:6] + b"\x00")


def test_a_payload_that_fails_to_load_keeps_its_classes_part(monkeypatch):
    Task = pytest.importorskip(
        "dask._task_spec", reason="run specs are dask._task_spec objects"
    ).Task

    point = module_class(_POINT)
    missing = types.ModuleType("only_on_the_sender")
    exec("def double(x):\n    return 2 * x\n", missing.__dict__)
    monkeypatch.setitem(sys.modules, "only_on_the_sender", missing)
    sender = connection.Sender()
    first = write(sender, Task(("t", 0), repr, point(0)))  # (the methods' blocks)
    failing = write(sender, Task(("t", 1), missing.double, point(1)))
    named = write(sender, Task(("t", 2), repr, point(2)))
    assert [kind(p) for p in (first, failing, named)] == ["keep", "keep", "named"]
    monkeypatch.delitem(sys.modules, "only_on_the_sender")
    receiver = connection.Receiver()
    assert read(receiver, first)() == repr(point(0))
    with pytest.raises(ModuleNotFoundError, match="only_on_the_sender"):
        read(receiver, failing)()  # that task fails, the worker goes on
    assert read(receiver, named)() == repr(point(2))


def test_buffers_out_of_band_are_handed_over_once_and_the_part_holds_none():
    point = module_class(_POINT + "    blob = bytearray(b'class-level bytes')\n")
    data = [bytearray(b"before"), bytearray(b"after")]
    sender, receiver = connection.Sender(), connection.Receiver()

    def dumped(value: object) -> tuple[bytes, list]:
        handed: list = []
        session = sender.session()
        token = gpd._CODE_BLOCKS.set(session)
        try:
            payload = gpd.dumps(value, buffer_callback=handed.append, protocol=5)
        finally:
            gpd._CODE_BLOCKS.reset(token)
        sender.commit(session)
        return payload, handed

    # A buffer handed over before the class is met: the class stays inline (a
    # restart would hand the buffer over twice).
    payload, handed = dumped([pickle.PickleBuffer(data[0]), point(1)])
    assert kind(payload) == "inline" and len(handed) == 1
    token = connection.RECEIVER.set(receiver)
    try:
        assert bytes(gpd.loads(payload, buffers=handed)[0]) == b"before"
    finally:
        connection.RECEIVER.reset(token)
    # After it: the classes go first; the buffer is handed over once.
    for _ in range(3):
        payload, handed = dumped([point(1), pickle.PickleBuffer(data[1])])
        assert kind(payload) != "inline" and [bytes(b) for b in handed] == [b"after"]
        token = connection.RECEIVER.set(receiver)
        try:
            value = gpd.loads(payload, buffers=handed)
        finally:
            connection.RECEIVER.reset(token)
        assert value[0] == point(1) and bytes(value[1]) == b"after"
        # The class attribute travelled in band in the part, not as a buffer.
        assert bytes(type(value[0]).blob) == b"class-level bytes"
    assert kind(payload) == "named"


def test_a_task_with_many_classes_puts_the_first_ones_first():
    namespace: dict = {"__name__": "__main__"}
    exec(
        "import dataclasses\n"
        + "".join(
            f"@dataclasses.dataclass\nclass C{i}:\n    x: int = {i}\n"
            for i in range(classes_first.MAX_CLASSES + 3)
        ),
        namespace,
    )
    values = [namespace[f"C{i}"]() for i in range(classes_first.MAX_CLASSES + 3)]
    sender, receiver = connection.Sender(), connection.Receiver()
    payloads = [write(sender, values) for _ in range(3)]
    assert [kind(p) for p in payloads] == ["keep", "keep", "named"]
    first = read(connection.Receiver(), classes_first.split(payloads[0])[1])
    assert [c.__name__ for c in first] == [f"C{i}" for i in range(classes_first.MAX_CLASSES)]
    for payload in payloads:
        loaded = read(receiver, payload)
        assert [v.x for v in loaded] == list(range(classes_first.MAX_CLASSES + 3))


def test_the_classes_part_holds_only_classes_the_task_pickles():
    # A class reached only through another (its base, an annotation) goes with
    # that class, not on its own; a by-value class the task names as a value
    # goes first too.
    namespace: dict = {"__name__": "__main__"}
    exec(
        "import dataclasses\n"
        "class Base:\n    pass\n"
        "class Tag:\n    pass\n"
        "@dataclasses.dataclass\nclass Point(Base):\n    x: int = 0\n",
        namespace,
    )
    sender = connection.Sender()
    payload = write(sender, [namespace["Point"](), namespace["Tag"]])
    head = read(connection.Receiver(), classes_first.split(payload)[1])
    assert [c.__name__ for c in head] == ["Point", "Tag"]


def test_a_part_bigger_than_the_bound_travels_every_time(monkeypatch):
    monkeypatch.setattr(classes_first, "MAX_PART", 64)
    point = module_class(_POINT)
    sender, receiver = connection.Sender(), connection.Receiver()
    payloads = [write(sender, point(i)) for i in range(3)]
    assert [kind(p) for p in payloads] == ["once"] * 3
    assert [read(receiver, p) for p in payloads] == [point(i) for i in range(3)]
    assert not any(type(value) is bytes for value, _ in receiver.held.values())


def test_an_evicted_part_is_a_miss_that_names_it(monkeypatch):
    point = module_class(_POINT)
    sender, receiver = connection.Sender(), connection.Receiver()
    payloads = [write(sender, point(i)) for i in range(3)]
    for payload in payloads[:2]:
        read(receiver, payload)
    monkeypatch.setattr(connection, "MAX_HELD", 2)
    for i in range(3):  # three other blocks: the part is the oldest, and goes
        receiver.keep(bytes([i]), (i,))
    with pytest.raises(UnpicklingError, match="holds no classes block"):
        read(receiver, payloads[2])


def test_a_pooled_pickler_starts_the_next_payload_afresh_after_a_restart():
    point = module_class(_POINT)
    sender, receiver = connection.Sender(), connection.Receiver()
    for i in range(3):
        read(receiver, write(sender, point(i)))
    # The same pooled pickler then writes a payload with no class: nothing of
    # the restart (its memo, its globals dict, its callback) is left.
    handed: list = []
    plain = gpd.dumps(
        [dataclasses.replace, pickle.PickleBuffer(b"x")], buffer_callback=handed.append
    )
    assert kind(plain) == "inline" and len(handed) == 1
    assert pickle.loads(plain, buffers=handed)[0] is dataclasses.replace
    assert read(receiver, write(sender, point(9))) == point(9)


#: A ``__main__`` dataclass with a class attribute that the sender (or the
#: worker) changes between tasks, for the scripts below.
_SCALED_POINT = """
import dataclasses

@dataclasses.dataclass
class Point:
    x: int
    scale = 1

    def scaled(self):
        return self.x * Point.scale
"""

_SENDER = (
    WRITE_SCRIPT
    + _SCALED_POINT
    + """
import pickle, sys

sender = connection.Sender()
rows = []
for i in range(5):
    if i == 3:
        Point.scale = 10  # the sender changes the class between tasks
    rows.append(write(sender, (Point.scaled, Point(i))))
with open(sys.argv[1], "wb") as out:
    pickle.dump(rows, out)
"""
)

_RECEIVER = (
    READ_SCRIPT
    + """
import graphpickle.integrations.dask_distributed as gpd
from graphpickle.core import classes_first
seen = []
for data in sent:
    method, point = gpd.loads(data)
    seen.append([classes_first.split(data)[0] if classes_first.is_framed(data) else 0, method(point)])
    type(point).scale = -1  # the worker changes it: the next task applies the sender's again
print(json.dumps(seen))
"""
)


def test_a_fresh_receiver_sees_each_change_of_the_sender_and_none_of_its_own(tmp_path):
    sent = tmp_path / "rows.pkl"
    run_python(_SENDER, str(sent), cwd=tmp_path)
    seen = json.loads(run_python(_RECEIVER, str(sent), cwd=tmp_path))
    # keep (blocks inline), keep (blocks named), named, keep (a new state), named
    assert seen == [[1, 0], [1, 1], [2, 2], [1, 30], [2, 40]]


_CLUSTER = (
    _SCALED_POINT
    + """
import collections, json
from distributed import Client, LocalCluster
from graphpickle.integrations import dask_distributed as gpd

def count_kinds():
    # On the worker: the kind of every payload in two parts its loads reads.
    from graphpickle.core import classes_first
    kinds = collections.Counter()
    split = classes_first.split
    def counting(data):
        found = split(data)
        kinds[found[0]] += 1
        return found
    classes_first.split = counting
    classes_first.kinds_seen = kinds  # (a function sent by value has globals of its own)

def kinds_seen():
    from graphpickle.core import classes_first
    return dict(classes_first.kinds_seen)

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        gpd.install(client)
        client.run(count_kinds)
        results = [client.gather(client.map(Point.scaled, [Point(i) for i in range(50)], pure=False))]
        Point.scale = 3  # a change on the client reaches the worker
        results.append(client.gather(client.map(Point.scaled, [Point(i) for i in range(5)], pure=False)))
        (seen,) = client.run(kinds_seen).values()
        client.restart()  # new workers, new connections: every part is sent again
        client.run(count_kinds)
        results.append(client.gather(client.map(Point.scaled, [Point(i) for i in range(5)], pure=False)))
        (again,) = client.run(kinds_seen).values()
    print(json.dumps([results, seen, again]))
"""
)


def test_a_cluster_sends_a_class_once_per_worker_and_its_changes(tmp_path):
    pytest.importorskip("dask._task_spec", reason="run specs are dask._task_spec objects")
    out = run_python(_CLUSTER, cwd=tmp_path, timeout=300)
    results, seen, again = json.loads(out.strip().splitlines()[-1])
    assert results == [[i for i in range(50)], [3 * i for i in range(5)], [3 * i for i in range(5)]]
    # Kept (a new state, or the methods' blocks named for the first time), then named.
    assert seen.get("1", 0) <= 8 and seen.get("2", 0) >= 45, seen
    assert again.get("1", 0) >= 1 and again.get("2", 0) >= 1, again


def test_a_restart_carries_again_only_what_its_own_payload_carried():
    point = module_class(_POINT)
    namespace: dict = {"__name__": "__main__"}
    exec("def f(x):\n    return ('f', x)\ndef g(x):\n    return ('g', x)\n", namespace)
    f, g = namespace["f"], namespace["g"]
    sender, receiver = connection.Sender(), connection.Receiver()
    session = sender.session()  # one write of two payloads, as a batched stream sends
    token = gpd._CODE_BLOCKS.set(session)
    try:
        first = gpd.dumps([f, 1])
        second = gpd.dumps([g, f, point(1)])  # g's block carried, then a restart at Point
    finally:
        gpd._CODE_BLOCKS.reset(token)
    sender.commit(session)
    assert kind(first) == "inline" and kind(second) == "keep"
    token = connection.RECEIVER.set(receiver)
    try:
        (f_block,) = connection.carried_by(first)
    finally:
        connection.RECEIVER.reset(token)
    # f's block went with the first payload and is named in the second.
    assert f_block not in second and connection.digest(f_block) in second
    loaded = [read(receiver, p) for p in (first, second)]
    assert loaded[0][0](1) == ("f", 1) and loaded[1][0](2) == ("g", 2) and loaded[1][2] == point(1)
    # Everything the sender counts as sent, g's block (which the restarted dump
    # had counted) among them, the worker holds.
    assert set(session.carried) <= set(receiver.held)


def test_threads_each_on_a_connection_of_their_own():
    classes = [module_class(_POINT), module_class(_POINT.replace("Point", "Other"), "Other")]
    failures: list = []

    def connection_of_its_own(seed: int) -> None:
        sender, receiver = connection.Sender(), connection.Receiver()
        try:
            for i in range(60):
                value = classes[(i + seed) % 2](i, seed)
                payload = write(sender, [value, (seed, i)])
                if read(receiver, payload) != [value, (seed, i)]:
                    failures.append((seed, i))
        except Exception as exc:  # (reported below: a thread's exception is lost)
            failures.append((seed, repr(exc)))

    import threading

    threads = [threading.Thread(target=connection_of_its_own, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_an_error_after_a_restart_names_the_object_that_failed():
    import threading

    point = module_class(_POINT)
    sender = connection.Sender()
    with pytest.raises(TypeError) as raised:
        write(sender, [point(1), threading.Lock()])
    where = str(raised.value) + "\n".join(getattr(raised.value, "__notes__", []))
    assert "lock" in where and "root[1]" in where, where
    assert "ClassesFirst" not in where and "root[0]" not in where, where


def test_a_failed_payload_keeps_blocks_its_task_part_names_through_the_classes_part(monkeypatch):
    # The task's part refers to the classes' part's memo (function_once, the
    # global its methods' blocks went by); a payload that fails before loading
    # g keeps g's block all the same, so the next payload, which names it, loads.
    Task = pytest.importorskip(
        "dask._task_spec", reason="run specs are dask._task_spec objects"
    ).Task
    point = module_class("from dask._task_spec import Task\n" + _POINT + "    kind = Task\n")
    namespace: dict = {"__name__": "__main__"}
    exec("def g(p):\n    return ('g', p.x)\n", namespace)
    g = namespace["g"]
    missing = types.ModuleType("only_on_the_sender")
    exec("def double(x):\n    return 2 * x\n", missing.__dict__)
    monkeypatch.setitem(sys.modules, "only_on_the_sender", missing)
    sender = connection.Sender()
    failing = write(sender, Task(("t", 0), missing.double, g, point(0)))
    named = write(sender, Task(("t", 1), g, point(1)))
    monkeypatch.delitem(sys.modules, "only_on_the_sender")
    receiver = connection.Receiver()
    task = read(receiver, failing)  # a task that raises (its class read through the memo)
    assert type(task) is Task
    with pytest.raises(ModuleNotFoundError):
        task()
    assert read(receiver, named)() == ("g", 1)


def test_a_class_met_after_the_dump_wrote_out_a_frame_stays_inline():
    # Starting again would write those bytes again: the class goes inline.
    point = module_class(_POINT)
    sender, receiver = connection.Sender(), connection.Receiver()
    big = b"x" * 200_000
    late, early = write(sender, [big, point(1)]), write(sender, [point(2), big])
    assert (kind(late), kind(early)) == ("inline", "keep")
    assert read(receiver, late) == [big, point(1)] and read(receiver, early) == [point(2), big]


def test_the_digests_a_sender_remembers_are_bounded_in_bytes():
    for i in range(40):  # classes' parts of a class whose state changes in every task
        connection.digest(bytes([i]) * (1024 * 1024))
    assert connection._digested <= connection._MAX_DIGESTED
    assert sum(map(len, connection._digests)) == connection._digested


_ELEMENT = st.one_of(
    st.tuples(st.just("point"), st.integers(0, 2), st.integers(0, 9)),
    st.tuples(st.just("buffer"), st.integers(1, 3)),
    st.tuples(st.just("big"), st.integers(1, 2)),
    st.tuples(st.just("function"), st.integers(0, 2)),
)
_STEP = st.one_of(
    st.tuples(st.just("send"), st.lists(_ELEMENT, max_size=6)),
    st.tuples(st.just("change"), st.integers(0, 2), st.integers(0, 3)),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=10), st.booleans())
def test_random_payloads_on_one_connection_load_as_they_were_sent(steps, out_of_band):
    # Classes, functions, buffers in and out of band and frames past 64 KiB in any
    # order, the sender's classes changing between payloads: every payload loads
    # as it was sent, every buffer is handed over once, and everything the
    # sender counts as sent the worker holds.
    namespace: dict = {"__name__": "__main__"}
    exec(
        "import dataclasses\n"
        + "".join(
            f"@dataclasses.dataclass\nclass C{i}:\n    x: int\n    tag = 0\n"
            f"def f{i}(x):\n    return (C{i}.tag, x)\n"
            for i in range(3)
        ),
        namespace,
    )
    made = {
        "point": lambda c, x: namespace[f"C{c}"](x),
        "buffer": lambda n: pickle.PickleBuffer(bytearray(b"b" * n)),
        "big": lambda n: b"B" * (70_000 * n),
        "function": lambda k: namespace[f"f{k}"],
    }
    sender, receiver = connection.Sender(), connection.Receiver()
    for step in steps:
        if step[0] == "change":
            namespace[f"C{step[1]}"].tag = step[2]
            continue
        value = [made[kind](*args) for kind, *args in step[1]]
        handed: list = []
        session = sender.session()
        token = gpd._CODE_BLOCKS.set(session)
        try:
            payload = gpd.dumps(
                value, buffer_callback=handed.append if out_of_band else None, protocol=5
            )
        finally:
            gpd._CODE_BLOCKS.reset(token)
        sender.commit(session)
        token = connection.RECEIVER.set(receiver)
        try:
            loaded = gpd.loads(payload, buffers=handed)
        finally:
            connection.RECEIVER.reset(token)
        assert len(handed) == (sum(kind == "buffer" for kind, *_ in step[1]) if out_of_band else 0)
        expected = [bytes(v.raw()) if isinstance(v, pickle.PickleBuffer) else v for v in value]
        got = [
            bytes(v) if isinstance(v, (bytearray, memoryview, pickle.PickleBuffer)) else v
            for v in loaded
        ]
        assert [g if not callable(g) or isinstance(g, type) else g(1) for g in got] == [
            e if not callable(e) or isinstance(e, type) else e(1) for e in expected
        ]
    assert set(sender.held) <= set(receiver.held)


def test_a_function_block_named_inside_the_call_that_carries_it_loads(monkeypatch):
    # A frozen slotted dataclass's __setattr__ reaches itself through its
    # closure (the class it checks) before its own function_once call runs:
    # the payload names the block inside the call that carries it. The block
    # is the connection's from the start of the load (connection.LOADING): the
    # task loads, once (each reduction runs once, as in cloudpickle's load).
    registry = types.ModuleType("graphpickle_test_made")
    exec(
        "made = []\ndef make():\n    made.append(1)\n    return 'made'\n"
        "class Made:\n    def __reduce__(self):\n        return (make, ())\n",
        registry.__dict__,
    )
    monkeypatch.setitem(sys.modules, "graphpickle_test_made", registry)
    namespace: dict = {"__name__": "__main__"}
    exec(
        "import dataclasses, graphpickle_test_made\n"
        "@dataclasses.dataclass(frozen=True, slots=True)\n"
        "class Point:\n    x: int\n    AAA = graphpickle_test_made.Made()\n",
        namespace,
    )
    sender = connection.Sender()
    payloads = [write(sender, [namespace["Point"](i)]) for i in range(3)]
    receiver = connection.Receiver()
    points = []
    for payload in payloads:
        before = len(registry.made)
        points.append(read(receiver, payload)[0])
        assert len(registry.made) == before + 1
    assert [point.x for point in points] == [0, 1, 2] and type(points[0]).AAA == "made"
    with pytest.raises(dataclasses.FrozenInstanceError):
        points[0].x = 5
