"""graphpickle.integrations.multiprocessing in a real Jupyter kernel.

A notebook's code lives in the kernel's ``__main__`` (IPython's user namespace),
which no worker can import: from 3.14 the stdlib's pools start workers with
``forkserver`` and so cannot reach it by reference (stock ``Pool.map`` hangs).
Here an ipykernel runs on this test's Python and executes cells as a user would,
each with a hard timeout: a hang is a failure. Before 3.14 the first cell sets
``forkserver``, 3.14's default, so that the cells need what a 3.14 notebook needs.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ipykernel", reason="ipykernel is not installed for this Python")
jupyter_client = pytest.importorskip(
    "jupyter_client", reason="jupyter_client is not installed for this Python"
)

pytestmark = pytest.mark.timeout(240)

CELL_TIMEOUT = 60  # seconds for one cell: a pool that hangs fails here

SETUP = """
import concurrent.futures, dataclasses, multiprocessing, sys
import graphpickle.integrations.multiprocessing as gpmp

gpmp.install()
if sys.version_info < (3, 14):
    multiprocessing.set_start_method("forkserver", force=True)
print("METHOD", multiprocessing.get_start_method())
"""

DEFINITIONS = """
def square(x):
    return x * x

@dataclasses.dataclass
class Point:
    x: int
    y: int

offset = 100
shift = lambda p: Point(p.x + offset, p.y)

def make_scaler(k):
    def scale(x):
        return x * k
    return scale

triple = make_scaler(3)
model = None

def init(value):
    global model
    model = value

def predict(x):
    return model, x
"""


class Kernel:
    """An ipykernel on this Python, and a blocking client to run cells in it."""

    def __init__(self, tmp_path: Path) -> None:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        spec = tmp_path / "kernels" / "graphpickle-test"
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (spec / "kernel.json").write_text(
            json.dumps({"argv": argv, "display_name": "test", "language": "python"})
        )
        specs = KernelSpecManager(kernel_dirs=[str(spec.parent)])
        self.manager = KernelManager(kernel_name="graphpickle-test", kernel_spec_manager=specs)
        self.manager.start_kernel(cwd=str(tmp_path))
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=CELL_TIMEOUT)

    def run(self, code: str, stop_on_error: bool = True) -> tuple[str, dict[str, Any] | None]:
        """Execute one cell: its printed output, and its error (``None`` if it ran).
        ``stop_on_error=False`` for a cell meant to fail: else the kernel may abort
        the next request (ipykernel 6.29 aborts those that arrive just after an
        error), and that cell would run nothing."""
        printed: list[str] = []
        error: list[dict[str, Any]] = []

        def hook(message: dict[str, Any]) -> None:
            kind, content = message["msg_type"], message["content"]
            if kind == "stream" and content["name"] == "stdout":
                printed.append(content["text"])
            elif kind == "error":
                error.append(content)

        try:
            reply = self.client.execute_interactive(
                textwrap.dedent(code),
                timeout=CELL_TIMEOUT,
                output_hook=hook,
                stop_on_error=stop_on_error,
            )
        except TimeoutError:
            pytest.fail(f"the cell hung (no reply in {CELL_TIMEOUT} s):\n{code}")
        if reply["content"]["status"] == "aborted":
            pytest.fail(f"the kernel aborted the cell without running it:\n{code}")
        return "".join(printed), (error[0] if error else None)

    def ok(self, code: str) -> str:
        printed, error = self.run(code)
        assert error is None, "\n".join(error["traceback"]) if error else ""
        return printed

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    running = Kernel(tmp_path)
    try:
        yield running
    finally:
        running.close()


def test_notebook_cells_use_the_stdlib_pools(kernel: Kernel, tmp_path: Path) -> None:
    assert "METHOD forkserver" in kernel.ok(SETUP)
    kernel.ok(DEFINITIONS)

    # Pool.map of a function, a closure and a lambda; a dataclass there and back.
    printed = kernel.ok("""
        with multiprocessing.Pool(2) as pool:
            print("POOL", pool.map(square, range(4)), pool.map(triple, range(3)),
                  pool.map(lambda x: x - 1, range(3)))
            moved = pool.map(shift, [Point(1, 2)])[0]
            print("POINT", moved, isinstance(moved, Point))
    """)
    assert "POOL [0, 1, 4, 9] [0, 3, 6] [-1, 0, 1]" in printed
    assert "POINT Point(x=101, y=2) True" in printed

    # An initializer sets a global that the tasks read (one __main__ per worker).
    printed = kernel.ok("""
        with multiprocessing.Pool(2, initializer=init, initargs=("pool-model",)) as pool:
            print("INIT", pool.map(predict, range(3)))
    """)
    assert "INIT [('pool-model', 0), ('pool-model', 1), ('pool-model', 2)]" in printed

    printed = kernel.ok("""
        with concurrent.futures.ProcessPoolExecutor(
            2, initializer=init, initargs=("executor-model",)
        ) as executor:
            print("EXECUTOR", list(executor.map(predict, range(2))))
            made = executor.submit(lambda: Point(0, offset)).result()
            print("MADE", made, isinstance(made, Point), executor.submit(triple, 5).result())
    """)
    assert "EXECUTOR [('executor-model', 0), ('executor-model', 1)]" in printed
    assert "MADE Point(x=0, y=100) True 15" in printed

    # A task whose module only the kernel has: the cell fails with the missing
    # module's name, and the same pool serves the next cell.
    # (Not in the kernel's working directory, which the workers have on sys.path.)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "only_here.py").write_text("def double(x):\n    return 2 * x\n")
    kernel.ok(f"""
        sys.path.insert(0, {str(tmp_path / "lib")!r})
        import only_here
        sys.path.pop(0)  # the workers will not find it
        pool = multiprocessing.Pool(2)
    """)
    _, error = kernel.run("pool.map(only_here.double, [1, 2])", stop_on_error=False)
    assert error is not None, "a task no worker can load ran"
    assert error["ename"] == "ModuleNotFoundError", error
    assert "only_here" in error["evalue"]
    printed = kernel.ok("""
        print("AFTER", pool.map(square, [5]))
        pool.close()
        pool.join()
    """)
    assert "AFTER [25]" in printed
