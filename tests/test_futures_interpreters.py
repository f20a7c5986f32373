"""graphpickle.integrations.futures.InterpreterPoolExecutor (Python 3.14+).

Each case runs a script as ``__main__`` of a fresh interpreter, from a file, ``-c``
or stdin, with a hard timeout. ``PYTHON=3.14 scripts/test`` and ``PYTHON=3.15
scripts/test`` run them; on 3.11-3.13 the name says it needs 3.14.
"""

from __future__ import annotations

import sys

import pytest
from conftest import run_main_from

needs_314 = pytest.mark.skipif(
    sys.version_info < (3, 14), reason="concurrent.futures.InterpreterPoolExecutor is new in 3.14"
)


# No __main__ guard, and a line that shows whether the script runs again in an
# interpreter (the stock executor re-runs a main *file* there to find __main__.f).
_CALLS = """
import threading
from concurrent import interpreters
from graphpickle.integrations.futures import InterpreterPoolExecutor

print("BODY", flush=True)

class Point:
    def __init__(self, x):
        self.x = x

class TaskFailed(Exception):
    pass

def double(x):
    return 2 * x

def fail(x):
    raise TaskFailed(f"bad input {x}")

base = 100

def make_adder(n):
    def add(x):
        return x + n + base
    return add

with InterpreterPoolExecutor(2) as pool:
    print(pool.submit(lambda x: x + base, 1).result(120))  # a lambda and a global
    print(pool.submit(make_adder(5), 1).result(120))  # a closure
    print(sum(pool.map(double, range(10))))  # a __main__ function
    point = pool.submit(lambda p: Point(p.x + 1), Point(4)).result(120)  # a class, both ways
    print(type(point) is Point, point.x)
    print(pool.submit(lambda: interpreters.get_current().id).result(120) != 0)

    # The task's exception, caused by CPython's report (as the stock executor)
    try:
        pool.submit(fail, 5).result(120)
    except TaskFailed as exc:
        print(exc, type(exc.__cause__).__name__, "in fail" in str(exc.__cause__))

    # An argument that cannot be pickled: from submit, with its path
    try:
        pool.submit(double, threading.Lock())
    except TypeError as exc:
        print(exc.graphpickle_path)

    # A result that cannot travel back: from result()
    try:
        pool.submit(lambda: {"lock": threading.Lock()}).result(120)
    except TypeError as exc:
        print(exc.graphpickle_path)
    print(pool.submit(abs, -7).result(120))  # the pool goes on

with InterpreterPoolExecutor(1, initializer=lambda: print("INIT", flush=True)) as pool:
    print(pool.submit(abs, -3).result(120))
print("done")
"""


@needs_314
@pytest.mark.parametrize("source", ["file", "-c", "stdin"])
def test_lambdas_closures_and_main_code_run_in_interpreters(tmp_path, source):
    proc = run_main_from(source, _CALLS, tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.splitlines() == [
        "BODY",
        "101",
        "106",
        "90",
        "True 5",
        "True",
        "bad input 5 ExecutionFailed True",
        "root[1][0]",
        "root['lock']",
        "7",
        "INIT",
        "3",
        "done",
    ]


@needs_314
def test_the_standard_executor_cannot_share_them(tmp_path):
    # What this executor is for: the stock one refuses a lambda that reads a global
    # (it marshals only functions without globals or a closure).
    code = """
    from concurrent.futures import InterpreterPoolExecutor
    base = 1
    with InterpreterPoolExecutor(1) as pool:
        try:
            pool.submit(lambda: base).result(120)
        except Exception as exc:
            print(type(exc).__name__)
    """
    proc = run_main_from("stdin", code, tmp_path)
    assert proc.stdout.split() == ["NotShareableError"], (proc.stdout, proc.stderr)


@needs_314
def test_a_module_that_refuses_subinterpreters_is_named(tmp_path):
    pytest.importorskip("numpy")
    code = """
    import numpy as np
    from graphpickle.integrations.futures import InterpreterPoolExecutor
    with InterpreterPoolExecutor(1) as pool:
        try:
            pool.submit(len, np.arange(3)).result(120)
        except ImportError as exc:
            print(*exc.__notes__, sep="\\n")
        print(pool.submit(len, [1, 2, 3]).result(120))
    """
    proc = run_main_from("stdin", code, tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.splitlines()[-2:] == [
        "graphpickle: numpy cannot be imported in a subinterpreter (its extension module "
        "numpy._core._multiarray_umath does not support them), so a call that needs it cannot "
        "run in an InterpreterPoolExecutor; use graphpickle.integrations.futures.ProcessPoolExecutor",
        "3",
    ]


@needs_314
def test_an_initializer_that_raises_breaks_the_pool_as_the_stock_one(tmp_path):
    code = """
    from concurrent.futures.interpreter import BrokenInterpreterPool
    from graphpickle.integrations.futures import InterpreterPoolExecutor

    class NoConfig(Exception):
        pass

    def setup():
        raise NoConfig("no config")

    with InterpreterPoolExecutor(1, initializer=setup) as pool:
        try:
            pool.submit(abs, -1).result(120)
        except BrokenInterpreterPool as exc:
            print(type(exc).__name__)
    """
    proc = run_main_from("stdin", code, tmp_path)
    assert proc.stdout.split() == ["BrokenInterpreterPool"], (proc.stdout, proc.stderr)
    assert "NoConfig: no config" in proc.stderr  # logged, as the stock executor does


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="the executor exists from 3.14")
def test_before_314_the_name_says_what_it_needs():
    from graphpickle.integrations.futures import InterpreterPoolExecutor

    with pytest.raises(RuntimeError, match=r"needs Python 3\.14 or later .* this is 3\.1[123]\."):
        InterpreterPoolExecutor()


# An interpreter's __main__ functions share one namespace, the interpreter's
# __main__: what the initializer sets, and what a task sets, is what later tasks read.
_ONE_MAIN_PER_INTERPRETER = """
from graphpickle.integrations.futures import InterpreterPoolExecutor

model = None
calls = 0

def init(value):
    global model
    model = value

def predict(x):
    global calls
    calls += 1
    return model, x, calls

with InterpreterPoolExecutor(1, initializer=init, initargs=("loaded",)) as pool:
    print(pool.submit(predict, 1).result(120), pool.submit(lambda x: predict(x), 2).result(120))
print("parent", model, calls)
"""


@needs_314
@pytest.mark.parametrize("source", ["file", "-c", "stdin"])
def test_an_initializers_global_is_what_the_tasks_read(tmp_path, source):
    proc = run_main_from(source, _ONE_MAIN_PER_INTERPRETER, tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.splitlines() == ["('loaded', 1, 1) ('loaded', 2, 2)", "parent None 0"]
