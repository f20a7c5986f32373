"""explain() and LargeCaptureWarning, on graphs whose by-value content is known."""

from __future__ import annotations

import json
import types
import warnings

import numpy as np
import pytest

import graphpickle
from graphpickle.diagnostics import ExplainReport

OFFSET = 3
BIG = np.zeros(200_000)  # 1.6 MB


def helper(x):
    return x + OFFSET


def make_graph():
    def uses_big(i):
        return helper(BIG[i])

    def make(n):
        table = list(range(n))
        return lambda i: table[i]

    graph = {
        "tasks": {("x", i): (uses_big, i) for i in range(3)},
        "lam": make(1000),
        "len": len,
        "text": "__main__",
    }
    return graph


def test_explain_reports_each_by_value_object_once_with_path_reason_and_size():
    graph = make_graph()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # explain itself never warns
        report = graphpickle.explain(graph)
    assert isinstance(report, ExplainReport)
    with pytest.warns(graphpickle.LargeCaptureWarning):
        assert report.total_bytes == len(graphpickle.dumps(graph))
    by_name = {e.name.rsplit(".", 1)[-1]: e for e in report.entries}
    assert set(by_name) == {"uses_big", "<lambda>"}  # helper is importable: by reference
    big = by_name["uses_big"]
    assert big.path == "root['tasks'][('x', 0)][0]"
    assert big.kind == "function" and big.reason == "local"
    assert big.nbytes > 1_600_000
    captures = {c.name: c for c in big.captures}
    assert captures["BIG"].kind == "global" and captures["BIG"].nbytes > 1_600_000
    assert captures["helper"].type == "function"
    lam = by_name["<lambda>"]
    assert lam.reason == "lambda" and lam.path == "root['lam']"
    assert [c.name for c in lam.captures] == ["table"]
    assert report.entries[0] is big  # largest first


def test_explain_renders_and_converts():
    graph = make_graph()
    report = graphpickle.explain(graph)
    text = str(report)
    assert "2 object(s) pickled by value" in text
    assert "root['tasks'][('x', 0)][0]" in text and "global BIG (numpy.ndarray)" in text
    as_dict = json.loads(json.dumps(report.to_dict()))
    assert as_dict["entries"][0]["captures"][0]["name"] == "BIG"


def test_explain_classes_and_modules():
    dynamic = types.ModuleType("gp_explain_dynamic")
    exec("VALUE = 1", dynamic.__dict__)

    class Local:
        pass

    report = graphpickle.explain([Local(), dynamic])
    kinds = {(e.kind, e.reason) for e in report.entries}
    assert kinds == {("class", "local"), ("module", "not importable")}
    assert {e.path for e in report.entries} == {"root[0]<class>", "root[1]"}


def test_explain_nothing_by_value():
    report = graphpickle.explain({"a": [1, 2], "f": len})
    assert report.entries == ()
    assert "0 object(s) pickled by value" in str(report)


def test_explain_raises_with_path_on_unpicklable():
    import threading

    with pytest.raises(TypeError, match=r"_thread\.lock") as info:
        graphpickle.explain({"x": threading.Lock()})
    assert info.value.graphpickle_path == "root['x']"


def test_large_capture_warning_once_per_function_per_payload():
    graph = make_graph()
    with pytest.warns(graphpickle.LargeCaptureWarning, match="'BIG'") as record:
        graphpickle.dumps(graph)
    assert len(record) == 1
    message = str(record[0].message)
    assert "uses_big" in message and "MB" in message
    assert record[0].filename == __file__  # points at the caller of dumps


def test_large_capture_warning_points_at_the_caller_with_either_hook(monkeypatch):
    from graphpickle.core import pickler as _pickler

    monkeypatch.setattr(_pickler, "_speedups", None)  # the pure-Python hook: deeper stack
    with pytest.warns(graphpickle.LargeCaptureWarning) as record:
        graphpickle.dumps(make_graph())
    assert record[0].filename == __file__


def test_explain_stays_quiet_on_a_deep_stack():
    # With a raised recursion limit, pickling runs on a helper thread: explain's
    # quiet mode must follow it there.
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            report = graphpickle.explain(make_graph())
    finally:
        sys.setrecursionlimit(limit)
    assert report.entries


def test_large_capture_threshold_is_configurable():
    graph = make_graph()
    try:
        graphpickle.set_large_capture_threshold(None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            graphpickle.dumps(graph)
        graphpickle.set_large_capture_threshold(1_000)  # the 1000-item list closure too
        with pytest.warns(graphpickle.LargeCaptureWarning) as record:
            graphpickle.dumps(graph)
        assert {str(r.message).split(" captures ")[1].split(" (")[0] for r in record} == {
            "global 'BIG'",
            "closure 'table'",
        }
    finally:
        graphpickle.set_large_capture_threshold(1_000_000)
    assert graphpickle.get_large_capture_threshold() == 1_000_000
    with pytest.raises(ValueError):
        graphpickle.set_large_capture_threshold(-1)


def test_estimate_is_close_for_common_values():
    from graphpickle.core.captures import estimate_nbytes

    for value in (np.zeros(100_000), b"x" * 50_000, "y" * 50_000, list(range(50_000))):
        actual = len(graphpickle.dumps(value))
        assert actual / 4 < estimate_nbytes(value) < actual * 10, type(value)
