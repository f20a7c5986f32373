"""Code blocks once per connection (graphpickle.core.connection), as the dask
integration sends them: a block goes once on a connection, then its digest;
the worker's end holds what that very connection sent, within its bounds, and
a digest it does not hold fails that one task with an error that names it.

What a sequence of payloads on one connection does in a fresh receiver, against
cloudpickle's, is checked by every scenario of test_cache_soundness.py (its
code-block payloads are written on one connection) and by the property test
below, with changes on the sender and on the receiver between tasks."""

from __future__ import annotations

import hashlib
import inspect
import json
import marshal
import os
import pickle
import sys
import threading
import types

import pytest
from conftest import run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cache_soundness import _ACTIONS, _STATE

import graphpickle.integrations.dask_distributed as gpd
from graphpickle._switches import CACHING
from graphpickle.core import blocks, connection
from graphpickle.errors import UnpicklingError

pytestmark = pytest.mark.skipif(not CACHING, reason="GRAPHPICKLE_NO_CACHE=1: no block is kept")


def write(sender: connection.Sender, obj: object) -> bytes:
    """One write on the connection: dumps, then the blocks count as sent."""
    session = sender.session()
    token = gpd._CODE_BLOCKS.set(session)
    try:
        payload = gpd.dumps(obj)
    finally:
        gpd._CODE_BLOCKS.reset(token)
    sender.commit(session)
    return payload


#: ``write`` above, for a sender script run as ``__main__`` in a fresh interpreter.
WRITE_SCRIPT = (
    "import graphpickle.integrations.dask_distributed as gpd\n"
    "from graphpickle.core import connection\n" + inspect.getsource(write)
)


#: A worker script's start: one connection receiving, and what the sender script
#: wrote, as ``sent``.
READ_SCRIPT = """
import json, pickle, sys
from graphpickle.core import connection
connection.RECEIVER.set(connection.Receiver())
with open(sys.argv[1], "rb") as f:
    sent = pickle.load(f)
"""


def read(receiver: connection.Receiver, payload: bytes) -> object:
    """The worker's loads of a payload its connection read."""
    token = connection.RECEIVER.set(receiver)
    try:
        return gpd.loads(payload)
    finally:
        connection.RECEIVER.reset(token)


def local_function(offset: int = 1):
    def add(x):
        return x + offset

    return add


def distinct_code(i: int):
    """A function by value whose code is its own (no module holds it)."""
    namespace = {"__name__": "nowhere_importable"}
    exec(f"def f(x):\n    return (x, {i})\n", namespace)
    return namespace["f"]


def test_a_block_goes_once_per_connection_then_its_digest():
    func = local_function()
    sender, receiver = connection.Sender(), connection.Receiver()
    first, again, third = (write(sender, [func, i]) for i in range(3))
    assert b"function_once" in first and b"function_ref" not in first
    assert b"function_ref" in again and b"function_once" not in again and b"function_ref" in third
    assert len(again) < len(first) - 50
    assert [f(x) for f, x in (read(receiver, p) for p in (first, again, third))] == [1, 2, 3]
    # Another connection holds nothing of this one's: a clear error, naming the digest.
    (digest,) = receiver.held
    with pytest.raises(UnpicklingError, match=digest.hex()) as caught:
        read(connection.Receiver(), again)
    assert "GRAPHPICKLE_NO_CACHE=1" in str(caught.value)
    # A new connection's sender starts empty: its first write carries the block.
    assert b"function_once" in write(connection.Sender(), [func, 0])


def test_a_block_counts_as_sent_only_once_its_write_returned():
    func = local_function()
    sender = connection.Sender()
    session = sender.session()
    token = gpd._CODE_BLOCKS.set(session)
    try:
        carried = gpd.dumps(func)
        named = gpd.dumps(func)  # the same write: named, the block is before it
    finally:
        gpd._CODE_BLOCKS.reset(token)
    assert b"function_once" in carried and b"function_ref" in named
    # The write raised (no commit): the next write carries the block again.
    assert b"function_once" in write(sender, func)


def test_a_failed_dumps_takes_back_what_it_carried():
    func = local_function()
    sender = connection.Sender()
    session = sender.session()
    token = gpd._CODE_BLOCKS.set(session)
    try:
        with pytest.raises((TypeError, pickle.PicklingError)):
            gpd.dumps([func, threading.Lock()])  # the block was written, then it failed
        after = gpd.dumps(func)
    finally:
        gpd._CODE_BLOCKS.reset(token)
    sender.commit(session)
    assert b"function_once" in after
    assert b"function_ref" in write(sender, func)


def _gone_module(monkeypatch):
    module = types.ModuleType("gone_for_blocks")
    exec("def double(x):\n    return 2 * x\n", module.__dict__)
    monkeypatch.setitem(sys.modules, "gone_for_blocks", module)
    return module


def test_the_blocks_of_a_payload_that_fails_to_load_are_kept(monkeypatch):
    # (a task that fails when it runs: dask 2024.8, the floor, has tuple run specs)
    Task = pytest.importorskip("dask._task_spec", reason="needs dask._task_spec").Task

    module = _gone_module(monkeypatch)
    func = local_function()
    sender, receiver = connection.Sender(), connection.Receiver()
    # Loading stops at the missing module, before the block: the block is
    # recovered from the payload's bytes.
    failing = [write(sender, [module.double, func]), write(sender, Task("k", module.double, func))]
    assert all(b"function_once" in p for p in failing[:1]) and b"function_once" not in failing[1]
    monkeypatch.delitem(sys.modules, "gone_for_blocks")
    with pytest.raises(ModuleNotFoundError):
        read(receiver, failing[0])
    with pytest.raises(ModuleNotFoundError):  # a task: it fails when it runs
        read(receiver, failing[1])({})
    named = write(sender, [func, 5])
    assert b"function_ref" in named
    loaded, x = read(receiver, named)
    assert loaded(x) == 6


def test_recover_ignores_bytes_that_are_not_a_code_once_block():
    receiver = connection.Receiver()
    code = marshal.dumps(local_function().__code__)
    token = connection.RECEIVER.set(receiver)
    try:
        blocks.recover(pickle.dumps([code, b"x" * 20], protocol=5))  # plain bytes
        blocks.recover(b"not a pickle")
        assert not receiver.held
        blocks.recover(pickle.dumps((blocks.code_once, b"\x00garbage"), protocol=5))
        assert not receiver.held  # refused as code_once refuses it
    finally:
        connection.RECEIVER.reset(token)


def test_an_evicted_block_fails_one_task_and_the_sender_never_names_one(monkeypatch):
    # (a task that fails when it runs: dask 2024.8, the floor, has tuple run specs)
    Task = pytest.importorskip("dask._task_spec", reason="needs dask._task_spec").Task

    monkeypatch.setattr(connection, "MAX_HELD", 4)
    funcs = [distinct_code(i) for i in range(10)]
    sender, receiver = connection.Sender(), connection.Receiver()
    # The sender starts afresh at half the receiver's bound: each of many
    # distinct functions, sent again and again, loads.
    for rounds in range(3):
        for i, func in enumerate(funcs):
            task = read(receiver, write(sender, Task("k", func, rounds)))
            assert task({}) == (rounds, i)
            assert len(receiver.held) <= 4 and len(sender.held) <= 2
    # Evicted under a sender that does not know it: that task fails, clearly.
    named = write(sender, Task("k", funcs[-1], 1))
    assert b"function_ref" in named
    receiver.held.clear()
    with pytest.raises(UnpicklingError, match=r"holds no function block [0-9a-f]{32}"):
        read(receiver, named)({})
    assert read(receiver, write(connection.Sender(), Task("k", funcs[0], 1)))({}) == (1, 0)


class _CodeOnce:
    """Pickles as blocks.code_once(block), as a sender of any intent may write."""

    def __init__(self, block: bytes) -> None:
        self.block = block

    def __reduce__(self):
        return (blocks.code_once, (self.block,))


def test_a_flood_of_blocks_stays_within_the_bounds(monkeypatch):
    monkeypatch.setattr(connection, "MAX_HELD", 50)
    monkeypatch.setattr(connection, "MAX_HELD_BYTES", 20_000)
    receiver = connection.Receiver()
    token = connection.RECEIVER.set(receiver)
    try:
        for i in range(2000):
            code = marshal.dumps(compile(f"x = {i}" + " + 1" * (i % 300), "<flood>", "exec"))
            # code blocks and function blocks, in one table
            block = marshal.dumps((code, 0, b"f", b"f", None, None, ())) if i % 2 else code
            once = _FunctionOnce(block) if i % 2 else _CodeOnce(block)
            pickle.loads(pickle.dumps(once, protocol=5))
            assert len(receiver.held) <= 50 and receiver.held_bytes <= 20_000
    finally:
        connection.RECEIVER.reset(token)
    assert receiver.held_bytes == sum(size for _, size in receiver.held.values())
    assert {type(value) for value, _ in receiver.held.values()} == {tuple, types.CodeType}


def test_a_digest_names_only_what_this_connection_sent():
    ours = types.FunctionType(compile("lambda: 'ours'", "<a>", "eval"), {})().__code__
    theirs = types.FunctionType(compile("lambda: 'theirs'", "<b>", "eval"), {})().__code__
    # (one bytes string each: marshal's bytes of a code object depend on reference counts)
    our_block, their_block = marshal.dumps(ours), marshal.dumps(theirs)
    mine, other = connection.Receiver(), connection.Receiver()
    for receiver, block in ((mine, our_block), (other, their_block)):
        token = connection.RECEIVER.set(receiver)
        try:
            pickle.loads(pickle.dumps(_CodeOnce(block), protocol=5))
        finally:
            connection.RECEIVER.reset(token)
    their_digest = hashlib.blake2b(their_block, digest_size=16).digest()
    forged = [their_digest, b"\x00" * 16, hashlib.blake2b(b"", digest_size=16).digest(), "text"]
    for digest in forged:
        token = connection.RECEIVER.set(mine)
        try:
            with pytest.raises(UnpicklingError, match="holds no code block"):
                blocks.code_ref(digest)
        finally:
            connection.RECEIVER.reset(token)
    # The digest is the receiver's own of the bytes it was sent.
    (held,) = mine.held
    assert held == hashlib.blake2b(our_block, digest_size=16).digest()
    token = connection.RECEIVER.set(mine)
    try:
        assert blocks.code_ref(held) is mine.held[held][0]
    finally:
        connection.RECEIVER.reset(token)
    with pytest.raises(UnpicklingError, match="holds no code block"):
        blocks.code_ref(held)  # no connection is receiving


def test_connections_in_threads_are_independent():
    funcs = [distinct_code(i) for i in range(6)]
    errors: list[BaseException] = []

    def one_connection(seed: int) -> None:
        sender, receiver = connection.Sender(), connection.Receiver()
        try:
            for step in range(150):
                func = funcs[(seed + step) % len(funcs)]
                loaded, x = read(receiver, write(sender, [func, step]))
                assert loaded(x) == (step, (seed + step) % len(funcs))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one_connection, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


# --- the handshake: format, whether the worker keeps blocks, who it is -----------


class _Comm:
    def __init__(self) -> None:
        self.remote_info: dict = {}


class _Stream:
    def __init__(self) -> None:
        self.comm = _Comm()
        self.sent: list[dict] = []

    def send(self, msg: dict) -> None:
        self.sent.append(msg)


class _Scheduler:
    def __init__(self) -> None:
        self.stream_comms = {"w": _Stream()}
        self.stream_handlers: dict = {}


class _Worker:
    def __init__(self) -> None:
        self.stream_handlers: dict = {}
        self.sent: list[dict] = []

    def batched_send(self, msg: dict) -> None:
        self.sent.append(msg)


def test_the_handshake_gives_a_table_only_to_a_ready_worker_of_this_format(monkeypatch):
    monkeypatch.setattr(gpd, "_COMMS_WRAPPED", {_Comm})
    scheduler = _Scheduler()
    gpd._accept_code_blocks(scheduler)
    say = scheduler.stream_handlers[gpd._CODE_BLOCKS_KEY]
    stream = scheduler.stream_comms["w"]
    info = stream.comm.remote_info
    # An older graphpickle (another format): plain payloads.
    say(worker="w", format=blocks.FORMAT - 1, keeps=True, incarnation="a")
    assert info == {} and not stream.sent
    # This format, not keeping blocks (GRAPHPICKLE_NO_CACHE=1 there): a block in every payload.
    say(worker="w", format=blocks.FORMAT, keeps=False, incarnation="a")
    assert info == {gpd._CODE_BLOCKS_KEY: blocks.FORMAT} and not stream.sent
    # Keeping them: the scheduler answers, and counts blocks once the worker is ready.
    worker = _Worker()
    notice = gpd._notice(worker) if gpd._COMMS_WRAPPED else None
    assert notice is not None and notice["keeps"] is True
    say(worker="w", **{k: v for k, v in notice.items() if k != "op"})
    assert gpd._SENT_KEY not in info and stream.sent == [
        {"op": gpd._CODE_BLOCKS_KEY, "incarnation": notice["incarnation"]}
    ]
    answer = dict(stream.sent[0])
    worker.stream_handlers[answer.pop("op")](**answer)
    (ready,) = worker.sent
    say(worker="w", **{k: v for k, v in ready.items() if k != "op"})
    held = info[gpd._SENT_KEY]
    assert type(held) is connection.Sender and held.incarnation == notice["incarnation"]
    say(worker="w", **{k: v for k, v in ready.items() if k != "op"})
    assert info[gpd._SENT_KEY] is held  # the same worker: the same table
    say(worker="w", **{**{k: v for k, v in ready.items() if k != "op"}, "incarnation": "b"})
    assert info[gpd._SENT_KEY] is not held  # another process: an empty table


def test_an_older_plugins_notice_is_refused_by_format():
    from graphpickle.integrations._dask_workers import InstallOnWorkers

    worker = _Worker()
    InstallOnWorkers(lambda: None, {"op": gpd._CODE_BLOCKS_KEY, "format": 3}).setup(worker)
    assert worker.sent == [{"op": gpd._CODE_BLOCKS_KEY, "format": 3}]
    scheduler = _Scheduler()
    gpd._accept_code_blocks(scheduler)
    scheduler.stream_handlers[gpd._CODE_BLOCKS_KEY](worker="w", format=3)
    assert scheduler.stream_comms["w"].comm.remote_info == {}


def test_the_cache_switch_turns_it_off_on_both_ends(tmp_path):
    code = """
    import json, pickle
    import graphpickle.integrations.dask_distributed as gpd
    from graphpickle.core import connection
    gpd.install()
    class Worker:
        stream_handlers = {}
        def batched_send(self, msg):
            pass
    notice = gpd._notice(Worker())
    def make():
        def add(x):
            return x + 1
        return add
    func = make()
    sender, receiver = connection.Sender(), connection.Receiver()
    payloads = []
    for _ in range(3):
        session = sender.session()
        token = gpd._CODE_BLOCKS.set(session)
        payloads.append(gpd.dumps(func))
        gpd._CODE_BLOCKS.reset(token)
        sender.commit(session)
    connection.RECEIVER.set(receiver)
    loaded = [pickle.loads(p)(1) for p in payloads]
    print(json.dumps([notice["keeps"], [b"function_ref" in p for p in payloads],
                      len(receiver.held), loaded]))
    """
    off = json.loads(run_python(code, cwd=tmp_path, env={"GRAPHPICKLE_NO_CACHE": "1"}))
    assert off == [False, [False, False, False], 0, [2, 2, 2]]
    on = json.loads(run_python(code, cwd=tmp_path, env={"GRAPHPICKLE_NO_CACHE": ""}))
    assert on == [True, [False, True, True], 1, [2, 2, 2]]


# --- sequences on one connection, changes on both ends, against cloudpickle ------

_SEQUENCE_SENDER = """
import collections, json, pickle, sys, cloudpickle
import graphpickle.integrations.dask_distributed as gpd
from graphpickle.core import connection
{state}
sender = connection.Sender()
rows = []
for action in json.loads(sys.argv[2]):
    if action in ACTIONS:
        exec(ACTIONS[action])
    session = sender.session()
    token = gpd._CODE_BLOCKS.set(session)
    ours = [gpd.dumps(f), gpd.dumps(f)]
    gpd._CODE_BLOCKS.reset(token)
    sender.commit(session)
    rows.append((action, ours, cloudpickle.dumps(f)))
with open(sys.argv[1], "wb") as out:
    pickle.dump(rows, out)
"""

# The worker: one connection, and a change made by each task to what it was given
# (its function, its globals, its code) before the next task arrives.
_SEQUENCE_RECEIVER = (
    READ_SCRIPT
    + """
import graphpickle.integrations.dask_distributed as gpd
which = int(sys.argv[2])
CHANGES = {
    "set a global": "f.__globals__['G'] = ('changed on the worker',)",
    "new code": "f.__code__ = (lambda d=None: 'worker code').__code__",
    "new defaults": "f.__defaults__ = ({'x': 'worker'},)",
    "change a default in place": "f.__defaults__[0]['x'] = 'worker'",
    "an attribute": "f.tag = 'worker'",
    "a class attribute": (
        "if 'Holder' in f.__globals__: f.__globals__['Holder'].attr = ('changed on the worker',)"
    ),
}
seen = []
for action, ours, theirs in sent:
    row = []
    for data in (ours if which else [theirs]):
        try:
            f = gpd.loads(data)  # (the worker's loads: a payload may have its classes first)
            row.append(repr(f()))
            exec(CHANGES.get(action.partition(" then ")[2], ""))
        except Exception as exc:
            row.append(f"raised {type(exc).__name__}")
    seen.append(row)
print(json.dumps(seen))
"""
)

_WORKER_CHANGES = ["set a global", "new code", "new defaults", "change a default in place",
                   "an attribute", "a class attribute", ""]  # fmt: skip


@settings(
    max_examples=int(os.environ.get("GP_CACHE_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(_ACTIONS)), st.sampled_from(_WORKER_CHANGES)),
        min_size=1,
        max_size=8,
    )
)
def test_a_sequence_on_one_connection_loads_as_fresh_cloudpickle_payloads(tmp_path_factory, steps):
    tmp_path = tmp_path_factory.mktemp("sequence")
    actions = [f"send first then {steps[0][1]}"] + [f"{a} then {w}" for a, w in steps]
    state = (
        _STATE
        + f"\nACTIONS = {{a + ' then ' + w: c for a, c in {_ACTIONS!r}.items() "
        + (f"for w in {_WORKER_CHANGES!r}}}")
    )
    sent = tmp_path / "rows.pkl"
    run_python(_SEQUENCE_SENDER.format(state=state), str(sent), json.dumps(actions), cwd=tmp_path)
    ours = json.loads(run_python(_SEQUENCE_RECEIVER, str(sent), "1", cwd=tmp_path))
    # cloudpickle's, each payload loaded anew (its function and globals are new
    # in every load; its classes' state applied again)
    theirs = json.loads(run_python(_SEQUENCE_RECEIVER, str(sent), "0", cwd=tmp_path))
    assert ours == [[t[0], t[0]] for t in theirs], (actions, ours, theirs)


# --- a real cluster -----------------------------------------------------------------

_CLUSTER = """
import os, sys, time, types
from distributed import Client, LocalCluster
from graphpickle.integrations import dask_distributed as gpd

def slow(x):
    time.sleep(0.01)
    return x + 1

def held_here():
    return sum(len(r.held) for r in gpd._receivers.values())

def tables(dask_scheduler):
    return [(t.incarnation, len(t.held)) for t in (
        bs.comm.remote_info.get("graphpickle-blocks-held") for bs in dask_scheduler.stream_comms.values())
        if t is not None]

def die():
    os._exit(1)

if __name__ == "__main__":
    # A module only this client has: a task naming it fails to load on the worker.
    mod = types.ModuleType("clientonly")
    exec("def double(x):\\n    return 2 * x\\n", mod.__dict__)
    sys.modules["clientonly"] = mod
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        gpd.install(client)
        assert client.gather(client.map(slow, range(20), pure=False)) == list(range(1, 21))
        ((first, held),) = client.run_on_scheduler(tables)
        assert held >= 1 and all(client.run(held_here).values())
        # A payload that fails to load carries a new function's first block; the
        # next tasks name it by its digest and run.
        def fresh(x, offset=100):
            return x + offset
        failing = client.submit(lambda x: (mod.double, fresh)[1](x), 1, pure=False)
        try:
            failing.result(60)
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("it loaded")
        assert client.gather(client.map(lambda x: fresh(x), range(5), pure=False)) == [
            100, 101, 102, 103, 104]
        # The worker dies mid-stream; its nanny starts another, which must be sent
        # every block again (a new connection, an empty table).
        futures = client.map(slow, range(200), pure=False)
        while sum(f.done() for f in futures) < 20:
            time.sleep(0.01)
        try:
            client.run(die)
        except Exception:
            pass
        assert client.gather(futures) == list(range(1, 201))
        client.wait_for_workers(1, timeout=60)
        ((second, held),) = client.run_on_scheduler(tables)
        assert second != first and held >= 1, (first, second, held)
    print("ok")
"""


def test_a_cluster_sends_each_block_once_per_worker_incarnation(tmp_path):
    pytest.importorskip("dask._task_spec", reason="run specs are dask._task_spec objects")
    out = run_python(_CLUSTER, cwd=tmp_path, timeout=300)
    assert out.split()[-1] == "ok"


def test_a_write_of_many_blocks_names_none_the_worker_may_have_evicted(monkeypatch):
    monkeypatch.setattr(connection, "MAX_HELD", 6)
    funcs = [distinct_code(i) for i in range(20)]
    sender, receiver = connection.Sender(), connection.Receiver()
    session = sender.session()
    token = gpd._CODE_BLOCKS.set(session)
    try:
        payloads = [gpd.dumps([func, i]) for i, func in enumerate(funcs)]
        payloads += [gpd.dumps([func, i]) for i, func in enumerate(funcs)]  # named again
    finally:
        gpd._CODE_BLOCKS.reset(token)
    sender.commit(session)
    for i, payload in enumerate(payloads):
        func, x = read(receiver, payload)
        assert func(x) == (i % 20, i % 20)


# --- function blocks: a function's immutable parts once per connection ----------


def _module_function(source: str, name: str, **module: object):
    """``name`` from ``source`` run in a namespace that looks like a module of
    its own (by value: ``__main__``, unless ``module`` says otherwise)."""
    namespace: dict = {"__name__": "__main__", "__package__": None, **module}
    namespace.setdefault("__file__", "/home/someone/notebooks/a-rather-long-path/analysis.py")
    exec(source, namespace)
    return namespace[name]


def _calls(payload: bytes) -> set[str]:
    """The globals a payload names (its classes' part's too, if it carries one)."""
    import pickletools

    from graphpickle.core import classes_first

    if classes_first.is_framed(payload):
        kind, head, body = classes_first.split(payload)
        named = _calls(bytes(body))
        # (a NAMED part is a digest, no pickle; its first byte may be anything)
        return named if kind == classes_first._NAMED else named | _calls(head)
    strings: list = []
    named = set()
    for opcode, arg, _ in pickletools.genops(payload):
        if "UNICODE" in opcode.name:
            strings.append(arg)
        elif opcode.name == "BINGET":
            strings.append(None)
        elif opcode.name == "STACK_GLOBAL":
            named.add(str(strings[-1]))
    return named


def test_a_function_block_goes_once_then_only_what_can_change():
    func = _module_function("def inc(x, *args):\n    return x + 1\n", "inc")
    sender, receiver = connection.Sender(), connection.Receiver()
    first, again = write(sender, [func, 1]), write(sender, [func, 2])
    assert {"function_once"} <= _calls(first) and "function_ref" not in _calls(first)
    assert {"function_ref"} <= _calls(again)
    assert not {"function_once", "make_function", "code_ref", "code_once"} & _calls(again)
    # Neither the module's path nor the function's names travel again.
    assert b"a-rather-long-path" in first and b"a-rather-long-path" not in again
    assert b"inc" not in again
    for payload, x in ((first, 1), (again, 2)):
        loaded, y = read(receiver, payload)
        assert (loaded(y), loaded.__name__, loaded.__qualname__, loaded.__module__) == (
            x + 1, "inc", "inc", "__main__",
        )  # fmt: skip
        assert loaded.__globals__["__file__"].endswith("analysis.py")
    (digest,) = [n for n, (v, _) in receiver.held.items() if type(v) is tuple]
    assert digest in again


def test_a_task_sent_again_is_at_most_one_and_a_half_times_its_importable_twin():
    pytest.importorskip("dask._task_spec", reason="the rows are dask._task_spec tasks")
    from graphpickle.cli import bench, workloads

    main = workloads.main_definitions()
    for message in workloads.BY_VALUE_MESSAGES[:3]:
        ours = bench.message_payload(bench.BLOCKS, message.build(main))
        twin = bench.message_payload(bench.BLOCKS, message.baseline())
        assert len(ours) <= 1.5 * len(twin), (message.name, len(ours), len(twin))


def test_what_a_function_block_does_not_hold_travels_in_every_payload():
    source = (
        "G = 'global'\n"
        "def make(cell):\n"
        "    def f(x: int = 1, *, k='k') -> str:\n"
        "        return (x, k, cell, G)\n"
        "    return f\n"
        "f = make('cell')\n"
    )
    func = _module_function(source, "f")
    sender, receiver = connection.Sender(), connection.Receiver()
    changes = [
        lambda: None,
        lambda: setattr(func, "__defaults__", (2,)),
        lambda: setattr(func, "__kwdefaults__", {"k": "new k"}),
        lambda: func.__annotations__.update(x=float),
        lambda: setattr(func, "tag", "an attribute"),
        lambda: setattr(func.__closure__[0], "cell_contents", "new cell"),
        lambda: func.__globals__.update(G="new global"),
    ]
    held = []
    for change in changes:
        change()
        payload = write(sender, func)
        loaded = read(receiver, payload)
        held.append(sum(type(v) is tuple for v, _ in receiver.held.values()))
        fresh = pickle.loads(gpd.dumps(func))  # (no connection: cloudpickle's form)
        assert loaded() == func() == fresh(), change
        # (3.14+: a function with an __annotate__ travels with it, as cloudpickle's)
        assert loaded.__annotations__ == fresh.__annotations__
        assert loaded.__kwdefaults__ == func.__kwdefaults__ == fresh.__kwdefaults__
        assert loaded.__dict__ == func.__dict__ == fresh.__dict__
    # None of those changes needed a new block: the first write carried them (3.14+:
    # the function's __annotate__ is one too).
    assert held == [held[0]] * len(changes) and held[0] >= 1
    assert "function_ref" in _calls(payload) and "function_once" not in _calls(payload)


_SHARING = """
G = 'module'
def setter(value):
    global G
    G = value
def getter():
    return G
def outer():
    def recursive(n):  # (its closure holds itself: never remembered, cloudpickle's form)
        return G if n < 1 else recursive(n - 1)
    return recursive
recursive = outer()
"""


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_functions_of_one_module_share_one_globals_dict_per_payload(order):
    setter, getter, recursive = (
        _module_function(_SHARING, n) for n in ("setter", "getter", "recursive")
    )
    # (one module namespace for all three)
    getter = types.FunctionType(getter.__code__, setter.__globals__, "getter")
    recursive = setter.__globals__["recursive"]
    funcs = (setter, getter, recursive)
    sender, receiver = connection.Sender(), connection.Receiver()
    loads = []
    for _ in range(3):
        loaded = read(receiver, write(sender, [funcs[i] for i in order]))
        loads.append(dict(zip(order, loaded, strict=True)))
    for s, g, r in ((x[0], x[1], x[2]) for x in loads):
        assert s.__globals__ is g.__globals__ is r.__globals__
        assert g() == r(2) == "module"
        s("written by the setter")
        assert g() == r(2) == "written by the setter"
    # Each payload made its own dict, and the sender's was never written.
    assert len({id(x[0].__globals__) for x in loads}) == 3 and setter.__globals__["G"] == "module"


def test_a_renamed_function_gets_a_new_block():
    func = _module_function("def f():\n    'doc'\n    return 1\n", "f")
    sender, receiver = connection.Sender(), connection.Receiver()
    read(receiver, write(sender, func))
    for change, attribute, value in [
        (lambda: setattr(func, "__name__", "renamed"), "__name__", "renamed"),
        (lambda: setattr(func, "__qualname__", "Outer.renamed"), "__qualname__", "Outer.renamed"),
        (lambda: setattr(func, "__doc__", "new doc"), "__doc__", "new doc"),
        (lambda: setattr(func, "__module__", "elsewhere"), "__module__", "elsewhere"),
    ]:
        change()
        payload = write(sender, func)
        assert "function_once" in _calls(payload), attribute
        assert getattr(read(receiver, payload), attribute) == value
        assert "function_ref" in _calls(write(sender, func))


def test_a_package_function_keeps_the_flat_form():
    func = _module_function(
        "f = lambda x: x + 1\n", "f", __name__="somepackage", __package__="somepackage",
        __path__=["/somewhere/somepackage"],
    )  # fmt: skip
    sender, receiver = connection.Sender(), connection.Receiver()
    payloads = [write(sender, func) for _ in range(2)]
    assert "make_function" in _calls(payloads[1]) and "code_ref" in _calls(payloads[1])
    assert not {"function_once", "function_ref"} & _calls(payloads[0] + payloads[1])
    for payload in payloads:
        loaded = read(receiver, payload)
        assert loaded(1) == 2 and loaded.__globals__["__path__"] == ["/somewhere/somepackage"]
        assert loaded.__globals__["__path__"] is not func.__globals__["__path__"]


class _FunctionOnce:
    """Pickles as blocks.function_once(block) alone, as any sender may write."""

    def __init__(self, block: bytes) -> None:
        self.block = block

    def __reduce__(self):
        return (blocks.function_once, (self.block,))


def _held_block(func) -> bytes:
    """The function block a connection's first payload of ``func`` carries."""
    receiver = connection.Receiver()
    payload = write(connection.Sender(), func)
    token = connection.RECEIVER.set(receiver)
    try:
        (block,) = connection.carried_by(payload)
    finally:
        connection.RECEIVER.reset(token)
    return block


def test_a_function_digest_names_only_a_function_block_this_connection_sent():
    ours = _held_block(_module_function("def f():\n    return 'ours'\n", "f"))
    theirs = _held_block(_module_function("def f():\n    return 'theirs'\n", "f"))
    code = marshal.dumps(compile("1", "<x>", "eval"))
    mine = connection.Receiver()
    token = connection.RECEIVER.set(mine)
    try:
        pickle.loads(pickle.dumps([_FunctionOnce(ours), _CodeOnce(code)], protocol=5))
        held = {type(v): name for name, (v, _) in mine.held.items()}
        assert held[tuple] == hashlib.blake2b(ours, digest_size=16).digest()
        forged = [
            hashlib.blake2b(theirs, digest_size=16).digest(),
            b"\x00" * 16,
            held[types.CodeType],
            "x",
        ]
        for digest in forged:
            with pytest.raises(UnpicklingError, match="holds no function block"):
                blocks.function_ref(digest)
        with pytest.raises(UnpicklingError, match="holds no code block"):
            blocks.code_ref(held[tuple])  # a function block is not code
        # A block whose bytes were changed is held under its own digest, never the original's.
        tampered = ours.replace(b"ours", b"evil")  # (in the code's constants)
        assert tampered != ours
        pickle.loads(pickle.dumps(_FunctionOnce(tampered), protocol=5))
        parts = (None, {}, {}, None, None, None, [], {})  # (closure, attributes, slots)
        made = blocks.function_ref(held[tuple], {}, *parts)
        assert made() == "ours"
        evil = blocks.function_ref(hashlib.blake2b(tampered, digest_size=16).digest(), {}, *parts)
        assert evil() == "evil"
    finally:
        connection.RECEIVER.reset(token)


_ONE = marshal.dumps(compile("1", "<x>", "eval"))


@pytest.mark.parametrize(
    ("parts", "match"),
    [
        ((1, 2), "another shape"),
        ((b"", 0, b"f", b"f", None, None, ()), "corrupted|not code"),
        ((_ONE, 9, b"f", b"f", None, None, ()), "another kind"),  # no such layout
        ((_ONE, 0, "f", "f", None, None, ()), "another kind"),  # (names travel as UTF-8)
        ((_ONE, 0, b"f", b"f", None, None, ((b"__path__", b"x"),)), "another kind"),
        ((_ONE, 0, b"f", b"f", None, None, ((b"__name__", b"x"),) * 2), "another kind"),
        ((_ONE, 0, b"f", b"f", 1, None, ()), "another kind"),  # a module that is not a str
        ((_ONE, 0, b"f", b"f", None, None, ((b"__file__", (b"x",)),)), "another kind"),
        ((_ONE, 0, b"\xff", b"f", None, None, ()), "corrupted"),  # not UTF-8
        ((marshal.dumps((1,)), 0, b"f", b"f", None, None, ()), "not code"),
        (b"\x00garbage", "corrupted"),  # (not marshal bytes)
        ("text", "bytes, not str"),
    ],
)
def test_a_function_block_that_is_not_one_is_refused(parts, match):
    block = parts if isinstance(parts, (bytes, str)) else marshal.dumps(parts)
    receiver = connection.Receiver()
    token = connection.RECEIVER.set(receiver)
    try:
        with pytest.raises(UnpicklingError, match=match):
            blocks.function_once(block)
        blocks.recover(pickle.dumps(_FunctionOnce(block), protocol=5))
    finally:
        connection.RECEIVER.reset(token)
    assert not receiver.held


def test_a_function_block_is_recovered_from_a_payload_that_failed_to_load(monkeypatch):
    module = _gone_module(monkeypatch)
    func = _module_function("def f(x=3):\n    return x\n", "f")
    sender, receiver = connection.Sender(), connection.Receiver()
    failing = write(sender, [module.double, func])  # the block comes after the failure
    assert "function_once" in _calls(failing)
    monkeypatch.delitem(sys.modules, "gone_for_blocks")
    with pytest.raises(ModuleNotFoundError):
        read(receiver, failing)
    assert [type(v) for v, _ in receiver.held.values()] == [tuple]
    named = write(sender, [func, func])
    assert "function_ref" in _calls(named)
    assert [f() for f in read(receiver, named)] == [3, 3]


_MAIN_SENDER = (
    WRITE_SCRIPT
    + """
import pickle, sys
G = 0
def bump():
    global G
    G += 1
    return G
def peek():
    return G
def scaled(x, factor=2):
    return x * factor
sender = connection.Sender()
payloads = []
for step in range(3):
    scaled.__defaults__ = (step + 2,)
    payloads.append(write(sender, [bump, peek, scaled]))
with open(sys.argv[1], "wb") as out:
    pickle.dump(payloads, out)
"""
)

_MAIN_RECEIVER = (
    READ_SCRIPT
    + """
seen = []
for data in sent:
    bump, peek, scaled = pickle.loads(data)
    seen.append([bump(), bump(), peek(), scaled(10), bump.__name__, scaled.__qualname__,
                 bump.__module__, sorted(k for k in bump.__globals__ if k != "__builtins__")])
print(json.dumps(seen))
"""
)


def test_main_functions_round_trip_to_a_fresh_interpreter_on_one_connection(tmp_path):
    sent = tmp_path / "payloads.pkl"
    run_python(_MAIN_SENDER, str(sent), cwd=tmp_path)
    payloads = pickle.loads(sent.read_bytes())
    assert ["function_ref" in _calls(p) for p in payloads] == [False, True, True]
    seen = json.loads(run_python(_MAIN_RECEIVER, str(sent), cwd=tmp_path))
    names = ["G", "__file__", "__name__", "__package__"]
    assert seen == [
        [1, 2, 2, 10 * (step + 2), "bump", "scaled", "__main__", names] for step in range(3)
    ]


def test_inspect_counts_a_function_block_as_one_function_by_value():
    from graphpickle.diagnostics import inspect

    func = _module_function("def inc(x):\n    return x + 1\n", "inc")
    sender = connection.Sender()
    for payload in (write(sender, func), write(sender, func)):
        report = inspect(payload, trust=("graphpickle",))
        assert report.verdict == "code"
        # (its base-globals dict, made by the same call given the block alone, is no function)
        assert [made.kind for made in report.by_value] == ["function"]


_BOTH_HOOKS = (
    WRITE_SCRIPT
    + """
import math, sys
from graphpickle.core.native import speedups
def floor_inc(x, *args):
    return math.floor(x) + 1
def make():
    return lambda x: (floor_inc(x), math.pi)
lam = make()
sender = connection.Sender()
payloads = []
def send(*parts):
    payloads.append(write(sender, list(parts)))
for _ in range(3):
    send(floor_inc, lam, math, floor_inc)
send(lam, floor_inc)  # (the other function first in its module)
globals()["__file__"] = "elsewhere.py"  # new base values: new blocks
send(floor_inc, lam)
send(floor_inc, lam)
sender.held.clear()  # (as a full table starts afresh): carried again
send(floor_inc)
send(floor_inc)
print(speedups is not None, ",".join(p.hex() for p in payloads))
"""
)


@pytest.mark.skipif(blocks._speedups is None, reason="the C module is not built")
def test_the_c_hook_and_the_python_hook_write_the_same_bytes(tmp_path):
    c = run_python(_BOTH_HOOKS, cwd=tmp_path, env={"GRAPHPICKLE_NO_SPEEDUPS": ""}).split()
    python = run_python(_BOTH_HOOKS, cwd=tmp_path, env={"GRAPHPICKLE_NO_SPEEDUPS": "1"}).split()
    assert (c[0], python[0]) == ("True", "False")
    assert c[1] == python[1]
    payloads = [bytes.fromhex(p) for p in c[1].split(",")]
    assert "function_ref" in _calls(payloads[2]) and "subimport" in _calls(payloads[2])
    once = ["function_once" in _calls(p) for p in payloads]
    assert once == [True, False, False, False, True, False, True, False]


# A base left empty by the first function of its module (the module had none of
# the base names) is filled by a later function without a block from the
# module's globals as they are then: here a str subclass, or a value whose __eq__
# changes that very dict. A later function with a block must then get what the
# Python function gives it (the flat form: held_items refuses the value), and
# nothing may run while the C hook reads the base.
_A_BASE_FILLED_LATER = (
    WRITE_SCRIPT
    + """
import gc
from graphpickle.core import blocks
module = {"__name__": "__main__"}
exec("def f(x):\\n    return x + 1\\ndef g(x):\\n    return x * 2\\n"
     "def h(x):\\n    return x - 1\\n", module)
f, g, h = module["f"], module["g"], module["h"]
h.__doc__ = 5  # (no block for h: a doc that is not a str)
class Name(str):
    pass
class Changes:
    def __eq__(self, other):  # grows the base the C hook would be reading
        for held in [o for o in gc.get_objects() if type(o) is blocks.HeldGlobals]:
            held.update({f"k{key}": None for key in range(20)})
        return True
    __hash__ = object.__hash__
class Sets:
    def __init__(self, value):
        self.value = value
    def __reduce__(self):
        module["__name__"] = self.value
        return (int, (0,))
sender = connection.Sender()
for _ in range(3):
    write(sender, [f, g])
del module["__name__"]
payloads = [write(sender, [f, Sets(Name("__main__")), h, g])]
del module["__name__"]
payloads.append(write(sender, [f, Sets(Changes()), h, g]))
print(",".join(p.hex() for p in payloads))
"""
)


@pytest.mark.skipif(blocks._speedups is None, reason="the C module is not built")
def test_a_base_filled_later_gets_the_python_answer(tmp_path):
    c = run_python(_A_BASE_FILLED_LATER, cwd=tmp_path, env={"GRAPHPICKLE_NO_SPEEDUPS": ""})
    python = run_python(_A_BASE_FILLED_LATER, cwd=tmp_path, env={"GRAPHPICKLE_NO_SPEEDUPS": "1"})
    assert c == python
    assert all("make_function" in _calls(bytes.fromhex(p)) for p in c.split(","))


@pytest.mark.skipif(blocks._speedups is None, reason="the C module is not built")
def test_the_c_hook_answers_a_held_function_block_itself():
    # Where the receiver holds the block, the C hook answers without the Python
    # function, for the first function of a module in a payload and for a
    # later one whose block holds the items of the base the first one made;
    # anywhere else (its first write, new base values) the Python function
    # answers. The bytes are the same either way (above).
    from graphpickle.core import reducers

    f = _module_function("def f(x):\n    return x + 1\ndef g(x):\n    return x * 2\n", "f")
    g = f.__globals__["g"]
    calls = []

    def counted(*args):
        calls.append(args[1].__name__)
        return reducers._block_reduction(*args)

    def hand_over(block_reduction, function_blocks):
        blocks._speedups.set_session_reductions(
            block_reduction, blocks.subimport, function_blocks, blocks.HeldGlobals,
            connection.Session, blocks.function_ref,
        )  # fmt: skip

    sender, receiver = connection.Sender(), connection.Receiver()
    hand_over(counted, reducers._function_blocks)
    try:
        fast = [write(sender, [f, g]) for _ in range(2)]
        calls.clear()
        fast.append(write(sender, [f, g]))
        assert calls == []  # (both answered in C)
        f.__globals__["__file__"] = "elsewhere.py"  # new base values: new blocks, in Python
        fast.append(write(sender, [f, g]))
        assert calls == ["f", "g"]
        calls.clear()
        fast.append(write(sender, [f, g]))
        assert calls == []
        calls.clear()
        hand_over(counted, None)  # the Python function answers every time
        assert write(sender, [f, g]) == fast[-1]
        assert calls == ["f", "g"]
    finally:
        hand_over(reducers._block_reduction, reducers._function_blocks)  # (as reducers.py)
    assert [[h(1) for h in read(receiver, p)] for p in fast] == [[2, 2]] * 5


def test_a_function_makes_the_same_block_each_time_one_is_made():
    from graphpickle.core import reducers

    point = _module_function(
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Point:\n"
        "    x: int\n"
        "    y: float\n"
        "point = Point(1, 2.0)\n",
        "point",
    )
    sender, receiver = connection.Sender(), connection.Receiver()
    payloads = [write(sender, point) for _ in range(3)]
    reducers._function_blocks.clear()  # (made again from nothing)
    payloads.append(write(sender, point))
    assert "function_once" in _calls(payloads[0])
    assert ["function_once" in _calls(p) for p in payloads[1:]] == [False] * 3
    assert all(read(receiver, p) == point for p in payloads)


def test_a_function_block_depends_on_values_only():
    code = marshal.dumps(compile("1", "<x>", "eval"))
    slots = ["f", "Point.__init__", {}, None, None, "__main__", None, None, [], {}]
    interned = sys.intern("Point.__init__")
    built = "".join(["Point.", "__init__"])  # equal, not interned
    kept = [built, built]  # (and referenced more than once)
    a = blocks.function_block(code, (0, {}, *slots[:1], interned, *slots[2:]), (("__name__", "x"),))
    b = blocks.function_block(code, (0, {}, *slots[:1], kept[0], *slots[2:]), (("__name__", "x"),))
    assert a == b
