"""inspect(): what a payload imports and builds, read without loading it."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphpickle


def make_payload():
    def task(x):
        return x + 1

    class Local:
        def method(self):
            return 1

    graph = {"f": task, "obj": Local(), "len": len, "arr": np.arange(10), "text": "__main__"}
    buffers: list[pickle.PickleBuffer] = []
    return graphpickle.dumps(graph, buffer_callback=buffers.append), buffers


class RunsCommand:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_report_lists_imports_by_value_objects_and_buffers():
    data, buffers = make_payload()
    report = graphpickle.inspect(data, buffers=[b.raw() for b in buffers])
    assert report.protocol == 5 and report.nbytes == len(data)
    assert "cloudpickle.cloudpickle" in report.modules and "numpy" in report.modules
    assert "builtins.len" in report.globals
    kinds = sorted((o.kind, o.name.rsplit(".", 1)[-1]) for o in report.by_value)
    assert kinds == [("class", "Local"), ("function", "method"), ("function", "task")]
    assert all(0 < o.nbytes < len(data) for o in report.by_value)
    assert report.buffers == 1 and report.buffer_sizes == (80,)
    assert report.dangerous == ()


def test_loading_nothing():
    # A payload that would run a command on load is reported, not run.
    data = pickle.dumps(RunsCommand())
    report = graphpickle.inspect(data)
    assert [d.name for d in report.dangerous] == [f"{os.system.__module__}.system"]
    assert "shell command" in str(report)


def test_plain_pickles_and_old_protocols():
    for protocol in range(6):
        report = graphpickle.inspect(pickle.dumps({"a": [1, 2], "f": len}, protocol))
        assert report.protocol == protocol
        assert report.globals == ("builtins.len",)  # the name loading imports
        assert report.by_value == ()


def test_agrees_with_what_loading_imports():
    # Every global the scan lists is one a loader would look up, and vice versa.
    data, buffers = make_payload()
    looked_up = []

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            looked_up.append(f"{module}.{name}")
            return super().find_class(module, name)

    import io

    Recording(io.BytesIO(data), buffers=buffers).load()
    assert set(looked_up) == set(graphpickle.inspect(data).globals)


@pytest.mark.parametrize("data", [b"", b"garbage", pickle.dumps([1, 2])[:-3], b"\x80\x05N"])
def test_bad_input_is_an_unpickling_error(data):
    with pytest.raises(graphpickle.UnpicklingError, match="not a readable pickle"):
        graphpickle.inspect(data)


def _cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "graphpickle", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def test_cli_inspect_file_and_stdin(tmp_path):
    data, _ = make_payload()
    path = tmp_path / "graph.pkl"
    path.write_bytes(data)
    text = _cli("inspect", str(path))
    assert text.returncode == 0, text.stderr
    assert b"pickled by value: 3" in text.stdout
    as_json = _cli("inspect", "-", "--json", stdin=data)
    assert as_json.returncode == 0
    report = json.loads(as_json.stdout)
    assert report["protocol"] == 5 and len(report["by_value"]) == 3


def test_cli_inspect_bad_input_is_one_line_and_nonzero(tmp_path):
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"\x80\x05truncated")
    for args in (("inspect", str(bad)), ("inspect", str(tmp_path / "missing.pkl"))):
        result = _cli(*args)
        assert result.returncode == 2
        assert result.stdout == b""
        assert len(result.stderr.strip().splitlines()) == 1
        assert b"Traceback" not in result.stderr


def test_cli_help_lists_commands():
    result = _cli("--help")
    assert result.returncode == 0
    for command in (b"demo", b"inspect"):
        assert command in result.stdout


@settings(max_examples=1000, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 255)), max_size=4))
def test_fuzz_inspect_raises_only_unpickling_error(edits):
    data, _ = _PAYLOAD
    mutated = bytearray(data)
    for pos, value in edits:
        mutated[pos % len(mutated)] = value
    with contextlib.suppress(graphpickle.UnpicklingError):
        graphpickle.inspect(bytes(mutated))


_PAYLOAD = make_payload()
