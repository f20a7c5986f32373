"""graphpickle.integrations.futures.ProcessPoolExecutor: how its workers start.

Each test runs a script as ``__main__`` in a fresh interpreter, from a file, ``-c``
(what a notebook looks like to a child) or stdin, with a hard timeout: a pool whose
workers cannot start must fail with words, never hang. ``PYTHON=3.14 scripts/test``
runs them where forkserver is the standard library's default.
"""

from __future__ import annotations

import pytest
from conftest import run_main_from


def _futures_example() -> str:
    """The concurrent.futures example of docs/engines.md, as written."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "engines.md").read_text()
    section = text.split("## concurrent.futures", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def _with_start_method(code: str, method: str) -> str:
    pool = "ProcessPoolExecutor(max_workers=4)"
    assert code.count(pool) == 1, code
    context = f'ProcessPoolExecutor(max_workers=4, mp_context=get_context("{method}"))'
    return "from multiprocessing import get_context\n" + code.replace(pool, context)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_futures_example_runs_as_a_script(tmp_path, method):
    from conftest import run_python

    code = _futures_example()
    assert "__name__" not in code  # the point: workers do not import the script
    out = run_python(_with_start_method(code, method), cwd=tmp_path, timeout=300)
    assert out.split() == ["101", "78900"]


# No __main__ guard: a worker that ran the script again would start a pool of its
# own (which multiprocessing refuses) and print BODY once more. From stdin the
# standard library would run '<stdin>' as a file; 3.14's fork server dies on it.
_UNGUARDED = """
import multiprocessing, os
from graphpickle.integrations.futures import ProcessPoolExecutor

print("BODY", flush=True)

class Point:
    def __init__(self, x):
        self.x = x

def double(x):
    return 2 * x

def setup(value):
    global configured
    configured = value

base = 100
context = multiprocessing.get_context({method})
with ProcessPoolExecutor(2, mp_context=context, initializer=setup, initargs=(7,)) as pool:
    print(pool.submit(lambda x: x + base, 1).result(120))  # a lambda, a global
    print(sum(pool.map(double, range(10), chunksize=3)))  # a __main__ function
    point = pool.submit(lambda: Point(5)).result(120)  # a __main__ class, and back
    print(isinstance(point, Point), point.x)
    pids = {{pool.submit(os.getpid).result(120) for _ in range(4)}}
    print(os.getpid() not in pids)
    # A lambda initializer (the standard executor cannot pickle one)
with ProcessPoolExecutor(1, mp_context=context, initializer=lambda: print("INIT", flush=True)) as pool:
    print(pool.submit(abs, -3).result(120))
print("done")
"""

_SOURCES = ["file", "-c", "stdin"]


# The default context: fork on 3.11-3.13, forkserver from 3.14.
@pytest.mark.parametrize("method", ["spawn", "forkserver", None])
@pytest.mark.parametrize("source", _SOURCES)
def test_workers_do_not_run_the_main_script(tmp_path, source, method):
    proc = run_main_from(source, _UNGUARDED.format(method=repr(method) if method else ""), tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.split() == ["BODY", "101", "90", "True", "5", "True", "INIT", "3", "done"]


# The parent's worker-start data says to chdir into a directory that is not there:
# the worker fails in multiprocessing's own preparation, before it loads anything of
# the pool. The parent names that error, not only "a process terminated abruptly".
_FAILS_BEFORE_START = """
import multiprocessing, multiprocessing.spawn, sys
from graphpickle.integrations.futures import BrokenProcessPool, ProcessPoolExecutor

preparation_data = multiprocessing.spawn.get_preparation_data

def missing_dir(name):
    data = preparation_data(name)
    data["dir"] = "/nonexistent/graphpickle-test"
    return data

multiprocessing.spawn.get_preparation_data = missing_dir
with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("{method}")) as pool:
    try:
        pool.submit(abs, -1).result(120)
    except BrokenProcessPool as exc:
        print("ERROR:", exc)
        print("NOTES:", *exc.__notes__)
        print("CAUSE:", type(exc.__cause__).__name__, exc.__cause__.filename)
        print("TRACEBACK:", "in prepare" in str(exc.__cause__.__cause__))
    else:
        raise AssertionError("no BrokenProcessPool")
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_worker_that_fails_at_start_names_its_error(tmp_path, method):
    proc = run_main_from("stdin", _FAILS_BEFORE_START.format(method=method), tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    out = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert out["ERROR"] == "a worker process failed to start, so builtins.abs could not run"
    assert out["NOTES"].startswith(
        "graphpickle: the worker's error: FileNotFoundError: [Errno 2] No such file or directory"
    ), out
    assert out["CAUSE"] == "FileNotFoundError /nonexistent/graphpickle-test"
    assert out["TRACEBACK"] == "True"


_BROKEN_STARTS = """
import multiprocessing, os, sys
from graphpickle.integrations.futures import BrokenProcessPool, ProcessPoolExecutor

# A module the parent imported and the workers cannot: its file is gone.
sys.path.insert(0, os.getcwd())
with open("gone.py", "w") as f:
    f.write("class Thing:\\n    pass\\n")
import gone
os.remove("gone.py")

class NoConfig(Exception):
    pass

def bad_initializer():
    raise NoConfig("no config")

def die():
    os._exit(3)

def expect_broken(future, message, note):
    try:
        future.result(120)
    except BrokenProcessPool as exc:
        assert str(exc) == message, exc
        assert exc.__notes__ == [note], exc.__notes__
        return exc
    raise AssertionError("no BrokenProcessPool")

if __name__ == "__main__":
    for method in sys.argv[1:]:
        context = multiprocessing.get_context(method)
        with ProcessPoolExecutor(1, mp_context=context, initializer=bad_initializer) as pool:
            exc = expect_broken(
                pool.submit(abs, -1),
                "the pool's initializer raised in a worker process, so builtins.abs could not run",
                "graphpickle: the worker's error: NoConfig: no config",
            )
            # The worker's own exception, of the parent's class, with its traceback
            assert isinstance(exc.__cause__, NoConfig), exc.__cause__
            assert "in bad_initializer" in str(exc.__cause__.__cause__)
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            assert pool.submit(abs, -1).result(120) == 1
            try:
                pool.submit(die).result(120)
            except BrokenProcessPool as exc:  # started, then died: not a start failure
                assert "died while running __main__.die" in str(exc), exc
                assert not getattr(exc, "__notes__", None), exc.__notes__
            else:
                raise AssertionError("no BrokenProcessPool")
            assert pool.submit(abs, -2).result(120) == 2  # a fresh pool
        if method == "fork":  # a fork worker has the parent's modules
            continue
        with ProcessPoolExecutor(1, mp_context=context, initializer=print, initargs=(gone.Thing(),)) as pool:
            expect_broken(
                pool.submit(abs, -1),
                "the pool's initializer could not be loaded in a worker process, "
                "so builtins.abs could not run",
                "graphpickle: the worker's error: graphpickle.errors.UnpicklingError: cannot load the "
                "pickle: it references module 'gone', which this interpreter cannot import (install "
                "it here, or register it for pickling by value on the sender): "
                "ModuleNotFoundError: No module named 'gone'",
            )
    print("ok")
"""


def test_a_failing_initializer_and_a_dying_worker_are_told_apart(tmp_path):
    from conftest import run_python

    out = run_python(_BROKEN_STARTS, "spawn", "forkserver", "fork", cwd=tmp_path, timeout=300)
    assert out.strip() == "ok"


@pytest.mark.parametrize(
    ("method", "module", "name"),
    [
        ("spawn", "multiprocessing.spawn", "_fixup_main_from_path"),
        ("forkserver", "multiprocessing.spawn", "_fixup_main_from_name"),
        ("forkserver", "multiprocessing.forkserver", "ForkServer"),
    ],
)
def test_a_multiprocessing_without_a_name_it_relies_on_is_refused(
    monkeypatch, method, module, name
):
    # Before any worker starts, and saying what is missing.
    import importlib
    import multiprocessing

    from graphpickle.integrations.futures import ProcessPoolExecutor

    monkeypatch.delattr(importlib.import_module(module), name)
    with pytest.raises(
        RuntimeError, match=rf"missing: .*{module}\.{name}.*get_context\(\"fork\"\)"
    ):
        ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(method))
    assert multiprocessing.active_children() == []


# A worker's __main__ functions share one namespace, the worker's __main__, as under
# fork: what the initializer sets, and what a task sets, is what later tasks read.
# The parent's values travel only where the worker has none of its own.
_ONE_MAIN_PER_WORKER = """
import multiprocessing, os
from graphpickle.integrations.futures import ProcessPoolExecutor

model = None
calls = 0

def init(value):
    global model
    model = value

def predict(x):
    global calls
    calls += 1
    return model, x, calls, os.getpid()

context = multiprocessing.get_context({method!r})
with ProcessPoolExecutor(1, mp_context=context, initializer=init, initargs=("loaded",)) as pool:
    first = pool.submit(predict, 1).result(120)
    second = pool.submit(lambda x: predict(x), 2).result(120)
    print(first[:3], second[:3], first[3] == second[3], list(pool.map(predict, [3])))
print("parent", model, calls)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
@pytest.mark.parametrize("source", _SOURCES)
def test_an_initializers_global_is_what_the_tasks_read(tmp_path, source, method):
    proc = run_main_from(source, _ONE_MAIN_PER_WORKER.format(method=method), tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    worker = proc.stdout.splitlines()[0].rsplit(" [", 1)[0]
    assert worker == "('loaded', 1, 1) ('loaded', 2, 2) True", proc.stdout
    assert "[('loaded', 3, 3, " in proc.stdout
    assert proc.stdout.splitlines()[1] == "parent None 0"
