"""Shared helpers: run code in fresh interpreters.

The point of graphpickle is that the receiver does not have what the sender
had (its ``__main__``, its local modules), so round trips that test that load in
a separate interpreter started from an empty directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Loads a payload with plain pickle in an interpreter where graphpickle cannot
# be imported, then runs a check. Its own globals are underscored so that they
# cannot stand in for a missing __main__ attribute of the sender.
_RECEIVER = """
import pickle as _pickle, sys as _sys
_sys.modules["graphpickle"] = None  # the receiver must not need graphpickle
with open(_sys.argv[1], "rb") as _payload_file:
    obj = _pickle.load(_payload_file)
{check}
"""


def run_python(
    code: str, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> str:
    """Run ``code`` as the ``__main__`` script of a new interpreter; return its stdout."""
    script = cwd / "script.py"
    script.write_text(textwrap.dedent(code))
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"subprocess failed ({proc.returncode})\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc.stdout


def run_main_from(
    source: str, code: str, cwd: Path, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``code`` as ``__main__`` of a fresh interpreter, from a file, ``-c`` or
    stdin (the three ways a script reaches a process pool's parent)."""
    code = textwrap.dedent(code)
    command = {
        "file": [sys.executable, "script.py"],
        "-c": [sys.executable, "-c", code],
        "stdin": [sys.executable, "-"],
    }[source]
    (cwd / "script.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        input=code if source == "stdin" else None,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def receiver(tmp_path: Path):
    """``receiver(payload, check)``: load ``payload`` in a fresh interpreter run
    from an empty directory with plain ``pickle`` and run ``check`` (code that
    sees the loaded object as ``obj`` and prints results); return its stdout."""

    def load_elsewhere(payload: bytes, check: str = "print(repr(obj))") -> str:
        where = tmp_path / "receiver"
        where.mkdir(exist_ok=True)
        payload_file = where / "payload.pkl"
        payload_file.write_bytes(payload)
        code = _RECEIVER.format(check=textwrap.dedent(check))
        return run_python(code, str(payload_file), cwd=where)

    return load_elsewhere


@pytest.fixture
def sender(tmp_path: Path):
    """``sender(code)``: run ``code`` as ``__main__`` in a fresh interpreter in
    its own directory; the code writes its payload to ``sys.argv[1]``. Returns
    the payload bytes."""

    def send(code: str, *, files: dict[str, str] | None = None) -> bytes:
        where = tmp_path / "sender"
        where.mkdir(exist_ok=True)
        for name, text in (files or {}).items():
            (where / name).write_text(textwrap.dedent(text))
        out = where / "payload.pkl"
        run_python(code, str(out), cwd=where)
        return out.read_bytes()

    return send


@pytest.fixture(params=["C", "Python"])
def implementation(request, monkeypatch):
    """Run a test with the C reducer_override and with the pure-Python one."""
    from graphpickle import determinism
    from graphpickle.core import pickler as _pickler

    if request.param == "Python":
        monkeypatch.setattr(_pickler, "_speedups", None)
        monkeypatch.setattr(determinism.sets, "_sets", None)
    elif _pickler._speedups is None:
        pytest.skip("graphpickle._speedups is not built")
    return request.param


def asks_for_a_huge_memo(data: bytes) -> bool:
    """Whether the C unpickler, reading ``data``, would grow its memo past a
    million entries (a PUT with a large index: it allocates and clears the
    whole list, and a mutated pickle can ask for gigabytes). Fuzz tests that
    load changed bytes unrestricted skip those: that is pickle's own memory
    bomb, which restricted loading (a dict memo) does not have."""
    import pickletools
    import warnings

    with warnings.catch_warnings():  # a STRING opcode's escapes warn on 3.13
        warnings.simplefilter("ignore", DeprecationWarning)
        ops = list(_ops_until_error(pickletools.genops(data)))  # to STOP or an error
    puts = ("PUT", "BINPUT", "LONG_BINPUT")
    return any(opcode.name in puts and argument > 1_000_000 for opcode, argument, _ in ops)


def _ops_until_error(ops):
    """The opcodes pickletools reads before an error (where the unpickler stops too)."""
    try:
        yield from ops
    except Exception:
        return


# Tests whose outcome is the same on every Python, dependency set and mode (the
# wheel's contents, the docs' links, the layout's imports, ...) carry
# @pytest.mark.once. GP_SKIP_ONCE=1 leaves them out: .ci/run runs them in its
# first stage only (docs/development.md, "What runs once").
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "once: the same on every Python, dependency set and mode (GP_SKIP_ONCE=1)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("GP_SKIP_ONCE") != "1":
        return
    once = [item for item in items if item.get_closest_marker("once") is not None]
    if once:
        config.hook.pytest_deselected(items=once)
        items[:] = [item for item in items if item.get_closest_marker("once") is None]
