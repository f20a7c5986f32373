"""Real engines running on graphpickle, started by the tests (no mocks)."""

from __future__ import annotations

import pytest

pytest.importorskip("joblib")

_LOKY_SCRIPT = """
import os, sys, threading
{setup}
from joblib import Parallel, delayed
import graphpickle

# Only graphpickle can pickle this: a reducer registered with graphpickle alone
# (cloudpickle, loky's default, refuses locks). It proves which pickler runs.
graphpickle.register_reducer(type(threading.Lock()), lambda lock: (threading.Lock, ()))

OFFSET = 10

def square(x):
    return x * x

def make_adder(n):
    return lambda x: x + n

class Point:
    def __init__(self, x):
        self.x = x

lock = threading.Lock()
add = make_adder(OFFSET)
tasks = [delayed(lambda x, lock: add(square(x)))(i, lock) for i in range(50)]
results = Parallel(n_jobs=2, backend="loky")(tasks)
assert results == [i * i + OFFSET for i in range(50)], results
points = Parallel(n_jobs=2, backend="loky")(delayed(Point)(i) for i in range(4))
assert all(type(p) is Point for p in points) and [p.x for p in points] == [0, 1, 2, 3]
from joblib.externals.loky.backend import reduction
assert issubclass(reduction.get_loky_pickler(), graphpickle.Pickler)
print("ok")
"""


@pytest.mark.parametrize(
    "setup",
    [
        'os.environ["LOKY_PICKLER"] = "graphpickle"',
        'from joblib.externals import loky; loky.set_loky_pickler("graphpickle")',
    ],
    ids=["env", "set_loky_pickler"],
)
def test_joblib_loky_runs_on_graphpickle(tmp_path, setup):
    from conftest import run_python

    assert run_python(_LOKY_SCRIPT.format(setup=setup), cwd=tmp_path).strip() == "ok"


_LOKY_SWAP_SCRIPT = """
import sys, threading
import graphpickle

# `import graphpickle as cloudpickle`, for a consumer that imports cloudpickle by
# name: loky's default pickler is then a subclass of graphpickle's CloudPickler.
sys.modules["cloudpickle"] = graphpickle
import loky
from loky.backend import reduction

graphpickle.register_reducer(type(threading.Lock()), lambda lock: (threading.Lock, ()))
OFFSET = 10

def square(x):
    return x * x

class Point:
    def __init__(self, x):
        self.x = x

if __name__ == "__main__":
    assert issubclass(reduction.get_loky_pickler(), graphpickle.CloudPickler)
    lock = threading.Lock()
    executor = loky.get_reusable_executor(max_workers=2)
    results = list(executor.map(lambda x, lock: square(x) + OFFSET, range(20), [lock] * 20))
    assert results == [i * i + OFFSET for i in range(20)], results
    # Workers answer with the real cloudpickle: what it writes loads here too.
    points = list(executor.map(Point, range(4)))
    assert all(type(p) is Point for p in points) and [p.x for p in points] == [0, 1, 2, 3]
    executor.shutdown()
    print("ok")
"""


def test_loky_runs_on_graphpickle_swapped_in_as_the_cloudpickle_module(tmp_path):
    # joblib up to 1.5 vendors cloudpickle, so the swap reaches standalone loky only.
    from conftest import run_python

    assert run_python(_LOKY_SWAP_SCRIPT, cwd=tmp_path).strip() == "ok"


_FUTURES_SCRIPT = """
import multiprocessing, os, threading
import numpy as np
import graphpickle
from graphpickle.integrations.futures import BrokenProcessPool, ProcessPoolExecutor

class Score:
    def __init__(self, value):
        self.value = value

class TaskFailed(Exception):
    pass

def scale(a, factor=2):
    return a * factor

def fail(x):
    raise TaskFailed(f"bad input {x}")

def die():
    os._exit(3)

if __name__ == "__main__":
    base = 100
    with ProcessPoolExecutor(max_workers=2) as pool:
        # lambdas, closures, __main__ functions and classes, numpy in and out
        assert pool.submit(lambda x: x + base, 1).result(60) == 101
        array = np.arange(1_000_000, dtype="f8")
        np.testing.assert_array_equal(pool.submit(scale, array, factor=3).result(60), array * 3)
        assert pool.submit(lambda v: Score(v), 7).result(60).value == 7

        # a task that raises: its own exception, with the remote traceback
        try:
            pool.submit(fail, 5).result(60)
        except TaskFailed as exc:
            assert str(exc) == "bad input 5" and "in fail" in str(exc.__cause__)
        else:
            raise AssertionError("no exception")

        # an argument that cannot be pickled: at submit, with its path
        try:
            pool.submit(scale, 1, factor=threading.Lock())
        except TypeError as exc:
            assert exc.graphpickle_path == "root['kwargs']['factor']", exc.graphpickle_path
        else:
            raise AssertionError("no TypeError")

        # a result that cannot travel back: pickle's error, located, from result()
        try:
            pool.submit(lambda: {"lock": threading.Lock()}).result(60)
        except TypeError as exc:
            assert exc.graphpickle_path == "root[1]['lock']", exc.graphpickle_path
            assert "root[1]['lock']" in exc.__notes__[0], exc.__notes__
        else:
            raise AssertionError("no TypeError")

        # a worker that dies: a clear error, and the pool stays usable
        try:
            pool.submit(die).result(60)
        except BrokenProcessPool as exc:
            assert "__main__.die" in str(exc), str(exc)
        else:
            raise AssertionError("no BrokenProcessPool")
        assert pool.submit(lambda: "alive").result(60) == "alive"

        # map, with and without chunks
        assert list(pool.map(lambda x, y: x * y, range(100), range(100), chunksize=7)) == [
            i * i for i in range(100)
        ]
        assert list(pool.map(scale, [1, 2, 3])) == [2, 4, 6]
    assert multiprocessing.active_children() == []
    print("ok")
"""


def test_futures_process_pool(tmp_path):
    from conftest import run_python

    assert run_python(_FUTURES_SCRIPT, cwd=tmp_path, timeout=300).strip() == "ok"


def test_standard_pool_fails_where_ours_works(tmp_path):
    # The comparison the executor exists for: the standard one cannot even send a lambda.
    from conftest import run_python

    out = run_python(
        """
        import concurrent.futures, multiprocessing
        if __name__ == "__main__":
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
                try:
                    pool.submit(lambda: 1).result(60)
                except Exception as exc:
                    print(type(exc).__name__)
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "PicklingError"
