"""A stale or partial compiled extension is not used: graphpickle falls back to
its Python path (graphpickle._reducers._load_speedups)."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from graphpickle import _reducers

STALE_IMPORT = """
import sys, types, warnings, pickle
stale = types.ModuleType("graphpickle._speedups")
stale.__file__ = "stale.so"
{setup}
sys.modules["graphpickle._speedups"] = stale
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import graphpickle
from graphpickle import _pickler
assert _pickler._speedups is None, _pickler._speedups
assert pickle.loads(graphpickle.dumps({{"a": (1, 2)}})) == {{"a": (1, 2)}}
assert graphpickle.loads(graphpickle.dumps([1])) == [1]
print([str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])
"""


@pytest.mark.parametrize(
    "setup",
    [
        "stale.Dispatch = object",  # most names missing
        # every name there, an older VERSION
        f"for name in {_reducers._SPEEDUPS_NAMES!r}:\n    setattr(stale, name, object)\n"
        "stale.VERSION = 1",
    ],
)
def test_a_stale_extension_falls_back_to_python(setup):
    code = STALE_IMPORT.format(setup=setup)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "stale.so is stale" in done.stdout
    assert "Python path" in done.stdout


def test_checked_speedups():
    partial = types.ModuleType("partial")
    partial.__file__ = "partial.so"
    with pytest.warns(RuntimeWarning, match="missing Dispatch"):
        assert _reducers._checked_speedups(partial) is None
    for name in _reducers._SPEEDUPS_NAMES:
        setattr(partial, name, object())
    with pytest.warns(RuntimeWarning, match="VERSION None"):
        assert _reducers._checked_speedups(partial) is None
    partial.VERSION = _reducers.SPEEDUPS_VERSION
    assert _reducers._checked_speedups(partial) is partial
