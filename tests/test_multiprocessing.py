"""graphpickle.integrations.multiprocessing: the stdlib's pools with notebook code.

Every case runs in a fresh interpreter whose ``__main__`` is a script file,
a ``python -c`` string (what a notebook looks like to a child) or a script read
from stdin, under each start method, with a hard timeout: a hang is a failure.
The cases are batched, one interpreter per (source, start method), to keep the
file's runtime modest. Without ``install()`` most of them hang or raise (see
docs/engines.md).
"""

from __future__ import annotations

import concurrent.futures.process
import multiprocessing
import multiprocessing.pool
import multiprocessing.reduction
import multiprocessing.spawn
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import graphpickle.integrations.multiprocessing as gpmp

# The body prints BODY when it runs: once in the parent, never in a worker.
_CASES = r"""
import json, multiprocessing as mp, sys, threading, types
import graphpickle.integrations.multiprocessing as gpmp

gpmp.install()
print("BODY", flush=True)

model = None

def init(value):
    global model
    model = value

def task(x):
    return x, model

class Point:
    def __init__(self, x):
        self.x = x

def same(obj):
    return obj

def make_adder(n):
    return lambda x: x + n

def in_child(conn, q, sq):
    got = conn.recv()
    conn.send((isinstance(got, Point), lambda: "pipe-lambda"))
    q.put(lambda: "queue-lambda")
    sq.put(Point(3))

def only_in_worker():
    mod = types.ModuleType("only_in_worker")
    exec("class Y:\n    pass\n", mod.__dict__)
    mod.Y.__module__ = "only_in_worker"
    sys.modules["only_in_worker"] = mod
    return mod.Y()

def main(method):
    ctx = mp.get_context(method)
    out = {}
    with ctx.Pool(2, initializer=init, initargs=(42,)) as pool:
        out["map_main"] = pool.map(task, range(4))
        out["map_chunks"] = pool.map(task, range(6), chunksize=3)
        out["map_lambda"] = pool.map(lambda x: x * 2, range(3))
        out["imap_closure"] = list(pool.imap(make_adder(10), range(3)))
        out["imap_unordered"] = sorted(pool.imap_unordered(task, range(3)))
        out["starmap"] = pool.starmap(lambda a, b: a * b, [(2, 3), (4, 5)])
        got = []
        pool.apply_async(task, (7,), callback=got.append).wait(60)
        out["apply_async_callback"] = got
        back = pool.apply(same, (Point(1),))
        out["class_identity"] = [type(back) is Point, isinstance(back, Point), back.x]
        try:
            pool.apply(same, (threading.Lock(),))
        except Exception as exc:
            out["bad_argument"] = [type(exc).__name__, " ".join(getattr(exc, "__notes__", []))]
        try:
            pool.apply(threading.Lock)
        except Exception as exc:
            out["bad_result"] = [type(exc).__name__, str(exc)]
        try:
            pool.apply(only_in_worker)
        except Exception as exc:
            out["result_not_loadable"] = [type(exc).__name__, str(exc)]
        # Made after the workers started: under fork too, they lack it.
        mod = types.ModuleType("only_in_parent")
        exec("class X:\n    pass\n", mod.__dict__)
        mod.X.__module__ = "only_in_parent"
        sys.modules["only_in_parent"] = mod
        try:
            pool.apply(same, (mod.X(),))
        except Exception as exc:
            out["task_not_loadable"] = [type(exc).__name__, str(exc)]
        out["still_serving"] = pool.map(abs, [-1, -2, -3])
    with ctx.Pool(1, initializer=lambda: init("from-lambda")) as pool:
        out["lambda_initializer"] = pool.apply(task, (0,))
    a, b = ctx.Pipe()
    q, sq = ctx.Queue(), ctx.SimpleQueue()
    p = ctx.Process(target=in_child, args=(b, q, sq))
    p.start()
    a.send(Point(2))
    same_class, fn = a.recv()
    out["pipe"] = [same_class, fn()]
    out["queue"] = q.get(timeout=60)()
    out["simple_queue"] = type(sq.get()) is Point
    p.join(60)
    p = ctx.Process(target=lambda n: sys.exit(n), args=(3,))
    p.start()
    p.join(60)
    out["process_lambda"] = p.exitcode
    with ctx.Manager() as manager:
        shared = manager.dict()
        shared["f"] = lambda: "manager-lambda"
        shared["p"] = Point(4)
        out["manager"] = [shared["f"](), type(shared["p"]) is Point]
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2, mp_context=ctx, initializer=init, initargs=(5,)) as ex:
        out["executor"] = [list(ex.map(task, range(2))), ex.submit(lambda: "ppe").result(60)]
        late = types.ModuleType("late_in_parent")  # (made once the workers run)
        exec("class Z:\n    pass\n", late.__dict__)
        late.Z.__module__ = "late_in_parent"
        sys.modules["late_in_parent"] = late
        try:
            ex.submit(same, late.Z()).result(60)
        except Exception as exc:
            out["executor_not_loadable"] = [type(exc).__name__, str(exc)]
        out["executor_still_serving"] = list(ex.map(abs, [-4, -5]))
    print(json.dumps(out), flush=True)

if __name__ == "__main__":
    main(sys.argv[1])
"""

_EXPECTED = {
    "map_main": [[0, 42], [1, 42], [2, 42], [3, 42]],
    "map_chunks": [[i, 42] for i in range(6)],
    "map_lambda": [0, 2, 4],
    "imap_closure": [10, 11, 12],
    "imap_unordered": [[0, 42], [1, 42], [2, 42]],
    "starmap": [6, 20],
    "apply_async_callback": [[7, 42]],
    "class_identity": [True, True, 1],
    "still_serving": [1, 2, 3],
    "lambda_initializer": [0, "from-lambda"],
    "pipe": [True, "pipe-lambda"],
    "queue": "queue-lambda",
    "simple_queue": True,
    "process_lambda": 3,
    "manager": ["manager-lambda", True],
    "executor": [[[0, 5], [1, 5]], "ppe"],
    "executor_not_loadable": ["ModuleNotFoundError", "No module named 'late_in_parent'"],
    "executor_still_serving": [4, 5],
}

# 3.14+: the default (forkserver) only; before, each start method.
_METHODS = ["fork", "spawn", "forkserver"] if sys.version_info < (3, 14) else ["forkserver"]
_SOURCES = ["file", "-c", "stdin"]


def _run(source: str, method: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if source == "file":
        script = cwd / "cases.py"
        script.write_text(_CASES)
        argv, stdin = [str(script), method], None
    elif source == "-c":
        argv, stdin = ["-c", _CASES, method], None
    else:
        argv, stdin = ["-", method], _CASES
    return subprocess.run(
        [sys.executable, *argv],
        input=stdin,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # a hang fails the test
    )


@pytest.mark.parametrize("method", _METHODS)
@pytest.mark.parametrize("source", _SOURCES)
def test_every_case_from_every_source(tmp_path, source, method):
    import json

    proc = _run(source, method, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.count("BODY") == 1, proc.stdout  # the script never re-ran in a worker
    out = json.loads(lines[-1])
    for key, expected in _EXPECTED.items():
        assert out[key] == expected, (key, out[key])
    # Failures raise in the parent, in words, and the pool keeps serving.
    kind, notes = out["bad_argument"]
    assert kind == "TypeError" and "root[3][0]" in notes and "_thread.lock" in notes
    kind, text = out["bad_result"]
    assert kind == "MaybeEncodingError" and "root[2][1]" in text
    kind, text = out["task_not_loadable"]
    assert kind == "ModuleNotFoundError" and "only_in_parent" in text
    kind, text = out["result_not_loadable"]
    assert kind == "ModuleNotFoundError" and "only_in_worker" in text


def test_a_forked_child_loads_main_classes_as_its_own(tmp_path):
    code = textwrap.dedent("""
        import multiprocessing as mp
        import graphpickle.integrations.multiprocessing as gpmp
        gpmp.install()
        class Point:
            pass
        def child(conn):
            conn.send(isinstance(conn.recv(), Point))
        if __name__ == "__main__":
            a, b = mp.get_context("fork").Pipe()
            p = mp.get_context("fork").Process(target=child, args=(b,))
            p.start()
            a.send(Point())
            print(a.recv())
            p.join()
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.stdout.split() == ["True"], proc.stderr


_NAMES = (
    (multiprocessing.reduction.ForkingPickler, "dumps"),
    (multiprocessing.reduction.ForkingPickler, "loads"),
    (multiprocessing.reduction, "dump"),
    (multiprocessing.spawn, "get_preparation_data"),
    (multiprocessing.pool, "worker"),
    (multiprocessing.pool.Pool, "_setup_queues"),
    (concurrent.futures.process, "_process_worker"),
)


def _current() -> list[object]:
    import multiprocessing.forkserver as forkserver

    return [vars(holder)[name] for holder, name in _NAMES] + [
        list(forkserver._forkserver._preload_modules)
    ]


def test_uninstall_restores_exactly():
    before = _current()
    assert not gpmp.installed()
    gpmp.install()
    try:
        assert gpmp.installed()
        gpmp.install()  # again: nothing more
        assert gpmp.installed()
        assert _current() != before
    finally:
        gpmp.uninstall()
    assert not gpmp.installed()
    after = _current()
    assert all(a is b for a, b in zip(after[:-1], before[:-1], strict=True))
    assert after[-1] == before[-1]


@pytest.mark.parametrize(
    ("holder", "name", "replacement"),
    [
        (multiprocessing.pool, "worker", lambda inqueue: None),
        (multiprocessing.reduction.ForkingPickler, "loads", lambda data: None),
        (multiprocessing.spawn, "get_preparation_data", lambda: None),
    ],
)
def test_unknown_internals_refuse_before_changing_anything(monkeypatch, holder, name, replacement):
    monkeypatch.setattr(holder, name, replacement)
    before = _current()
    with pytest.raises(gpmp.MultiprocessingIntegrationError, match="nothing was installed"):
        gpmp.install()
    assert not gpmp.installed()
    assert all(a is b for a, b in zip(_current()[:-1], before[:-1], strict=True))


def test_an_unknown_python_refuses(monkeypatch):
    monkeypatch.setattr(gpmp, "SUPPORTED_PYTHONS", ((3, 99),))
    with pytest.raises(gpmp.MultiprocessingIntegrationError, match=r"3\.99"):
        gpmp.install()
    assert not gpmp.installed()


class _Registered:
    pass


def test_a_reducer_registered_later_applies_to_the_next_message():
    import pickle
    from multiprocessing.reduction import ForkingPickler

    gpmp.install()
    try:
        ForkingPickler.dumps(_Registered())  # the reused pickler is made
        ForkingPickler.register(_Registered, lambda obj: (str, ("registered",)))
        assert pickle.loads(ForkingPickler.dumps(_Registered())) == "registered"
    finally:
        del vars(ForkingPickler)["_extra_reducers"][_Registered]
        gpmp.uninstall()


@pytest.mark.timeout(60)  # (its workers are threads: a hang would be in this process)
def test_a_thread_pool_still_works():
    from multiprocessing.pool import ThreadPool

    gpmp.install()
    try:
        with ThreadPool(2) as pool:
            assert pool.map(lambda x: x + 1, range(3)) == [1, 2, 3]
            assert pool.apply_async(abs, (-2,)).get(30) == 2
    finally:
        gpmp.uninstall()


_CODE_ONCE = r"""
import json, multiprocessing as mp, sys
import graphpickle.integrations.multiprocessing as gpmp
from multiprocessing.reduction import ForkingPickler

gpmp.install()

def task(x):
    return "first", x

seen = []

def codes(_):
    seen.append(sys._getframe().f_code)  # (kept: ids of live objects differ)
    return len({id(code) for code in seen})

if __name__ == "__main__":
    out = {}
    messages = [bytes(ForkingPickler.dumps((1, i, task, (i,), {}))) for i in range(3)]
    out["blocks"] = [b"graphpickle.core.blocks" in m for m in messages]
    with mp.get_context(sys.argv[1]).Pool(1) as pool:
        out["first"] = pool.map(task, range(2))
        # Each message makes a new function around the code object the worker keeps.
        out["code_kept"] = pool.map(codes, range(4), chunksize=1)[-1] == 1

        def task(x):  # redefined: new code
            return "second", x

        out["redefined"] = pool.map(task, range(2))
        task.__defaults__ = ()
        task.__code__ = (lambda x=7: ("third", x)).__code__
        task.__defaults__ = (7,)
        out["code_and_defaults_changed"] = pool.apply(task)
    print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("no_cache", [False, True])
@pytest.mark.parametrize("method", _METHODS)
def test_a_function_code_travels_as_a_block_and_changes_reach_the_worker(
    tmp_path, method, no_cache
):
    import json

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRAPHPICKLE_NO_CACHE")}
    if no_cache:
        env["GRAPHPICKLE_NO_CACHE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", _CODE_ONCE, method],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    # Its code travels as a block, which the worker turns into a code object
    # once (each time with GRAPHPICKLE_NO_CACHE=1).
    assert out["blocks"] == [True] * 3
    assert out["first"] == [["first", 0], ["first", 1]]
    assert out["code_kept"] is not no_cache
    # A changed function reaches a worker that has the old one (fork would give
    # a worker the version of its start; the function mapped is sent anew).
    assert out["redefined"] == [["second", 0], ["second", 1]]
    assert out["code_and_defaults_changed"] == ["third", 7]
