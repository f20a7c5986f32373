"""3.15's ``lazy import`` binds a proxy in ``__main__``'s dict until the name is
first used, and pickle cannot write one (cloudpickle neither: "cannot pickle
'lazy_import' object"). A by-value function that uses such a name travels with
what the name imports; the receiver, a fresh interpreter with plain pickle,
imports it when it loads the function."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.skipif(sys.version_info < (3, 15), reason="lazy import is 3.15's")

SENDER = """
lazy import json
lazy from os import path as ospath
lazy from json import dumps as to_json
lazy import xml.dom.minidom
lazy import graphpickle_no_such_module
import sys, types
import graphpickle

def uses_module(x):
    return json.loads(json.dumps(x))

def uses_submodule_attribute(x):
    return ospath.join("a", str(x))

def uses_function(x):
    return to_json([x])

def uses_dotted_name(x):
    return xml.dom.minidom.parseString(f"<v n='{x}'/>").documentElement.getAttribute("n")

def uses_a_missing_module(x):
    return graphpickle_no_such_module.f(x)

payload = graphpickle.dumps([uses_module, uses_submodule_attribute, uses_function, uses_dotted_name])
# (os.path is imported before the script runs: that binding is made at once)
lazy_still = [n for n in ("json", "to_json", "xml") if type(globals()[n]) is types.LazyImportType]
print("still lazy:", lazy_still)
try:
    graphpickle.dumps({"task": uses_a_missing_module})
except graphpickle.PicklingError as exc:
    print("refused:", repr(str(exc)))
open(sys.argv[1], "wb").write(payload)
"""


@pytest.mark.parametrize("env", [{}, {"GRAPHPICKLE_NO_SPEEDUPS": "1"}], ids=["C", "Python"])
def test_a_function_using_lazy_imports_travels_with_what_they_import(tmp_path, receiver, env):
    from conftest import run_python

    out = run_python(SENDER, str(tmp_path / "payload.pkl"), cwd=tmp_path, env=env)
    # The sender's bindings stay lazy: only the import ran, as the first use would.
    assert "still lazy: ['json', 'to_json', 'xml']" in out
    # A lazy import that fails is a PicklingError that names it and where it sits.
    refused = out.split("refused: ")[1]
    assert "root['task'].__globals__['graphpickle_no_such_module']" in refused, refused
    assert (
        "importing <lazy_import 'graphpickle_no_such_module'> failed (ModuleNotFoundError"
        in refused
    ), refused
    loaded = receiver(
        (tmp_path / "payload.pkl").read_bytes(),
        "print([f(7) for f in obj])",
    )
    assert loaded.strip() == "[7, 'a/7', '[7]', '7']"
