"""graphpickle.integrations.futures: the documented example as a script, and pools that break at start.

Each test runs a script as ``__main__`` in a fresh interpreter, with a timeout: a
pool whose workers cannot start must fail with words, never hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


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
    assert 'if __name__ == "__main__":' in code
    out = run_python(_with_start_method(code, method), cwd=tmp_path, timeout=300)
    assert out.split() == ["101", "78900"]


def _run_failing(code: str, cwd) -> subprocess.CompletedProcess[str]:
    script = cwd / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# The example without its __main__ guard: each worker, importing the main module,
# starts a pool of its own, which multiprocessing refuses; the worker exits. The
# parent's error says so, not only "a process terminated abruptly".
_UNGUARDED = """
from multiprocessing import get_context
from graphpickle.integrations.futures import BrokenProcessPool, ProcessPoolExecutor

with ProcessPoolExecutor(max_workers=2, mp_context=get_context("{method}")) as pool:
    try:
        pool.submit(lambda x: x + 1, 1).result(120)
    except (BrokenProcessPool, ConnectionError, EOFError) as exc:
        print("ERROR:", type(exc).__name__, exc)
        print("NOTES:", *getattr(exc, "__notes__", []))
        raise
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_pool_started_outside_the_main_guard_says_why_it_broke(tmp_path, method):
    proc = _run_failing(_UNGUARDED.format(method=method), tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    error = next(line for line in proc.stdout.splitlines() if line.startswith("ERROR:"))
    notes = next(line for line in proc.stdout.splitlines() if line.startswith("NOTES:"))
    assert f"under the {method!r} start method" in notes
    assert "imports the main module again" in notes
    assert 'if __name__ == "__main__":' in notes
    if method == "forkserver" and sys.version_info >= (3, 14):
        # The forkserver process itself imports the main module, starts a pool
        # there and dies: starting a worker fails with the connection it held
        # (or, if the pool got that far, the pool breaks).
        kinds = ("ConnectionResetError", "BrokenPipeError", "EOFError", "BrokenProcessPool")
        assert error.split()[1] in kinds, error
        return
    assert "no worker process could start to run __main__.<lambda>" in error
    # The parent's traceback carries the same words, the note included.
    assert "BrokenProcessPool: no worker process could start" in proc.stderr
    assert "imports the main module again" in proc.stderr.split("BrokenProcessPool:")[-1]
    # The worker's own cause is on stderr, as before.
    assert "bootstrapping phase" in proc.stderr


_BROKEN_STARTS = """
import multiprocessing, os
from graphpickle.integrations.futures import BrokenProcessPool, ProcessPoolExecutor

def bad_initializer():
    raise ValueError("no config")

def die():
    os._exit(3)

if __name__ == "__main__":
    for method in ("spawn", "forkserver"):
        context = multiprocessing.get_context(method)
        with ProcessPoolExecutor(1, mp_context=context, initializer=bad_initializer) as pool:
            try:
                pool.submit(abs, -1).result(120)
            except BrokenProcessPool as exc:
                assert "initializer raised" in str(exc) and "builtins.abs" in str(exc), exc
                assert not getattr(exc, "__notes__", None), exc.__notes__
            else:
                raise AssertionError("no BrokenProcessPool")
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
    print("ok")
"""


def test_a_failing_initializer_and_a_dying_worker_are_told_apart(tmp_path):
    from conftest import run_python

    assert run_python(_BROKEN_STARTS, cwd=tmp_path, timeout=300).strip() == "ok"
