"""A stale or partial compiled extension is not used: graphpickle falls back to
its Python path (graphpickle._native.load)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from graphpickle import _native
from graphpickle.core import native

STALE_IMPORT = """
import sys, types, warnings, pickle
stale = types.ModuleType("graphpickle.core._speedups")
stale.__file__ = "stale.so"
{setup}
sys.modules["graphpickle.core._speedups"] = stale
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import graphpickle
from graphpickle.core import pickler as _pickler
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
        f"for name in {native.NAMES!r}:\n    setattr(stale, name, object)\nstale.VERSION = 1",
    ],
)
def test_a_stale_extension_falls_back_to_python(setup):
    code = STALE_IMPORT.format(setup=setup)
    # The loader's check runs only where the C parts are not switched off.
    env = {k: v for k, v in os.environ.items() if k != "GRAPHPICKLE_NO_SPEEDUPS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "stale.so is stale" in done.stdout
    assert "Python path" in done.stdout


def test_checked_speedups():
    partial = types.ModuleType("partial")
    partial.__file__ = "partial.so"
    with pytest.warns(RuntimeWarning, match="missing Dispatch"):
        assert _native.checked(partial, native.VERSION, native.NAMES) is None
    for name in native.NAMES:
        setattr(partial, name, object())
    with pytest.warns(RuntimeWarning, match="VERSION None"):
        assert _native.checked(partial, native.VERSION, native.NAMES) is None
    partial.VERSION = native.VERSION
    assert _native.checked(partial, native.VERSION, native.NAMES) is partial


def test_every_extension_is_built_unless_disabled():
    # Each part's C code is optional at install time; in this project's
    # environments each must build and match its Python side.
    from graphpickle.determinism import sets, values
    from graphpickle.wire import frames

    built = {
        "core": native.speedups,
        "wire": frames._frames,
        "determinism": sets._sets,
        "values": values._values,
    }
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        assert set(built.values()) == {None}
    else:
        assert None not in built.values(), built


REIMPORT = """
import importlib, pickle, sys
import graphpickle, graphpickle.wire, graphpickle.determinism.sets, graphpickle.determinism.values
from graphpickle.core.native import speedups
assert speedups is not None
for name in (
    "graphpickle.core._speedups",
    "graphpickle.wire._frames",
    "graphpickle.determinism._sets",
    "graphpickle.determinism._values",
):
    first = sys.modules.pop(name)
    again = importlib.import_module(name)
    assert again is not first and again.VERSION == first.VERSION, name
assert pickle.loads(graphpickle.dumps(lambda: 1))() == 1
print("ok")
"""


def test_each_extension_imports_again_as_a_new_module():
    # Multi-phase initialisation: a module object made again shares the state
    # its part made once (_extension.h).
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        pytest.skip("the C parts are switched off")
    done = subprocess.run([sys.executable, "-c", REIMPORT], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# -- which parts are active, and an install that built none ------------------------------


def test_native_parts_says_what_each_part_runs():
    import graphpickle
    from graphpickle.determinism import sets, values
    from graphpickle.wire import frames

    parts = graphpickle.native_parts()
    assert list(parts) == list(_native.PARTS) == ["core", "wire", "determinism", "values"]
    loaded = {
        "core": native.speedups,
        "wire": frames._frames,
        "determinism": sets._sets,
        "values": values._values,
    }
    expected = "off" if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS") else "active"
    assert parts == dict.fromkeys(parts, expected)
    assert all((status == "active") == (loaded[p] is not None) for p, status in parts.items())


def test_a_stale_extension_is_reported_stale():
    code = STALE_IMPORT.format(setup="stale.Dispatch = object") + (
        "print(graphpickle.native_parts())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GRAPHPICKLE_NO_SPEEDUPS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    expected = {"core": "stale", "wire": "active", "determinism": "active", "values": "active"}
    assert str(expected) in done.stdout


WITHOUT_C = """
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import graphpickle, graphpickle.wire
    assert graphpickle.loads(graphpickle.dumps(lambda: 1))() == 1
    assert graphpickle.dumps({1, 2}, deterministic=True)
    assert graphpickle.wire.unpack(graphpickle.wire.pack([1])) == [1]
assert graphpickle.__file__.startswith(sys.argv[1]), graphpickle.__file__
print(json.dumps({
    "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
    "parts": graphpickle.native_parts(),
}))
"""


def _copy_without_extensions(tmp_path):
    """graphpickle as an install without a C compiler leaves it: no extension files."""
    import shutil

    import graphpickle

    source = os.path.dirname(graphpickle.__file__)
    ignore = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    shutil.copytree(source, tmp_path / "graphpickle", ignore=ignore)
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def test_an_install_without_c_parts_warns_once_at_import(tmp_path):
    import json

    env = _copy_without_extensions(tmp_path)
    env.pop("GRAPHPICKLE_NO_SPEEDUPS", None)
    run = [sys.executable, "-c", WITHOUT_C, str(tmp_path)]
    done = subprocess.run(run, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["parts"] == dict.fromkeys(["core", "wire", "determinism", "values"], "not built")
    [warning] = report["warnings"]  # one, naming every part, and how to get them
    assert "compiled parts core, wire, determinism, values are not built" in warning
    assert "install a C compiler" in warning and "--force-reinstall --no-cache-dir" in warning
    assert "graphpickle.native_parts()" in warning
    # --version says so too.
    version = subprocess.run(
        [sys.executable, "-m", "graphpickle", "--version"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert "native parts (0 of 4 active): core not built, wire not built" in version.stdout
    # Switched off by the user: no warning.
    env["GRAPHPICKLE_NO_SPEEDUPS"] = "1"
    done = subprocess.run(run, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {"warnings": [], "parts": dict.fromkeys(report["parts"], "off")}


def test_a_built_install_does_not_warn():
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        pytest.skip("the C parts are switched off")
    code = "import graphpickle, graphpickle.wire; print(graphpickle.native_parts())"
    done = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(dict.fromkeys(_native.PARTS, "active"))


BROKEN = """
import importlib.abc, sys, warnings
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "graphpickle.wire._frames":
            raise ImportError("undefined symbol: PyFoo")
sys.meta_path.insert(0, Refuse())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import graphpickle, graphpickle.wire
print([str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])
print(graphpickle.native_parts())
"""


def test_a_built_part_that_fails_to_import_warns_and_is_reported_broken():
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        pytest.skip("the C parts are switched off")
    done = subprocess.run([sys.executable, "-c", BROKEN], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    warnings, parts = done.stdout.strip().splitlines()
    assert "graphpickle.wire._frames fails to import (ImportError: undefined symbol" in warnings
    assert "'wire': 'broken'" in parts and "'core': 'active'" in parts
