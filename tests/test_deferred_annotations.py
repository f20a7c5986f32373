"""Code written for Python 3.14's deferred annotations (PEP 649/749).

Typed code annotates with names it imports only for the type checker
(``if TYPE_CHECKING:``); nothing fails until the annotations are read. A
function, class, method, closure or dataclass written so in ``__main__`` must
travel by value (cloudpickle 3.1 raises ``NameError`` on it), and on a receiver
that has only plain pickle and cloudpickle its annotations must behave as on the
sender: reading them raises the same ``NameError``, and
``annotationlib.get_annotations(..., format=FORWARDREF)`` gives the same keys and
forward references. Nothing is evaluated while pickling.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from conftest import run_python

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 14), reason="annotations are deferred from Python 3.14 on"
)

# The sender's code; OBSERVE describes each object the same way on both sides.
_CODE = """
import dataclasses
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import pandas as pd

EVALUATED = []
def evaluated(note):
    EVALUATED.append(note)
    return int

def f(df: pd.DataFrame, n: int = 1) -> int:
    return n + 1

def g(x: Later) -> int:  # a name defined below, as deferred annotations allow
    return 3

class Later:
    pass

class C:
    class Inner:
        pass
    x: pd.DataFrame
    y: int
    z: Later  # a module global, read through the class scope
    w: Inner  # a name of the class body
    def m(self, s: pd.Series) -> int:
        return 2

@dataclasses.dataclass
class D:
    a: pd.DataFrame
    b: int = 4

def outer():
    k = 5
    def inner(v: pd.Index) -> int:
        return k
    return inner

def noisy(x: evaluated("read")) -> None:
    return None

OBJECTS = {"f": f, "g": g, "C": C, "C()": C(), "C.m": C.m, "D": D, "D(None)": D(None),
           "inner": outer(), "noisy": noisy}
"""

_OBSERVE = """
import annotationlib

def _describe(value):
    if isinstance(value, annotationlib.ForwardRef):
        return ["ref", value.__forward_arg__]
    # (__name__: cloudpickle does not keep a nested by-value class's __qualname__)
    return ["value", getattr(value, "__name__", repr(value))]

def observe(name, obj):
    target = obj if callable(obj) else type(obj)
    try:
        annotations = {k: _describe(v) for k, v in target.__annotations__.items()}
    except Exception as exc:
        annotations = f"raised {type(exc).__name__}: {exc}"
    forward = annotationlib.get_annotations(target, format=annotationlib.Format.FORWARDREF)
    calls = {"f": lambda: obj(None), "g": lambda: obj(None), "C.m": lambda: obj(None, None),
             "inner": lambda: obj(None), "D(None)": lambda: obj.b, "C()": lambda: type(obj).m(obj, None)}
    result = calls[name]() if name in calls else None
    fields = getattr(target, "__dataclass_fields__", {})
    types = {k: _describe(field.type) for k, field in fields.items()}
    return [annotations, {k: _describe(v) for k, v in forward.items()}, result, types]
"""

_SENDER = (
    _CODE
    + _OBSERVE
    + """
import json, pickle, sys
import graphpickle
from graphpickle.integrations import dask_distributed as gpd
payloads = {}
for name, obj in OBJECTS.items():
    payloads[name] = [graphpickle.dumps(obj), gpd.dumps(obj), graphpickle.dumps(obj, deterministic=True)]
assert not EVALUATED, EVALUATED  # pickling read no annotation
with open(sys.argv[1], "wb") as out:
    pickle.dump(payloads, out)
print(json.dumps({name: observe(name, obj) for name, obj in OBJECTS.items()}))
"""
)

_RECEIVER = (
    _OBSERVE
    + """
import json, pickle, sys
sys.modules["graphpickle"] = None  # plain pickle and cloudpickle only
with open(sys.argv[1], "rb") as f:
    payloads = pickle.load(f)
seen = {}
for name, datas in payloads.items():
    seen[name] = [observe(name, pickle.loads(data)) for data in datas]
print(json.dumps(seen))
"""
)


def test_deferred_annotations_travel_and_behave_as_on_the_sender(tmp_path):
    sender_dir, receiver_dir = tmp_path / "sender", tmp_path / "receiver"
    sender_dir.mkdir()
    receiver_dir.mkdir()
    payloads = sender_dir / "payloads.pkl"
    expected = json.loads(run_python(_SENDER, str(payloads), cwd=sender_dir))
    # What the sender sees, written out: the pins that make this test mean something.
    assert expected["f"][0] == "raised NameError: name 'pd' is not defined"
    assert expected["f"][1]["df"] == ["ref", "pd.DataFrame"]
    assert expected["g"][0]["x"] == ["value", "Later"]
    assert expected["C"][1] == {
        "x": ["ref", "pd.DataFrame"],
        "y": ["value", "int"],
        "z": ["value", "Later"],
        "w": ["value", "Inner"],
    }
    seen = json.loads(run_python(_RECEIVER, str(payloads), cwd=receiver_dir))
    for name, observed in seen.items():
        assert observed == [expected[name]] * 3, name


_POOL = (
    _CODE
    + _OBSERVE
    + """
import json
from graphpickle.integrations.futures import ProcessPoolExecutor

def remote(name, obj):
    import __main__
    return observe(name, obj)

if __name__ == "__main__":
    with ProcessPoolExecutor(max_workers=1) as pool:
        futures = {name: pool.submit(remote, name, obj) for name, obj in OBJECTS.items()}
        seen = {name: future.result(timeout=60) for name, future in futures.items()}
    here = {name: observe(name, obj) for name, obj in OBJECTS.items()}
    print(json.dumps([seen, here]))
"""
)


def test_deferred_annotations_through_the_process_pool(tmp_path):
    seen, here = json.loads(run_python(_POOL, cwd=tmp_path))
    assert seen == here


def test_deterministic_payloads_of_deferred_annotations_match_across_processes(tmp_path):
    code = (
        _CODE
        + """
import hashlib
import graphpickle
from dask.base import tokenize
from graphpickle.integrations import dask_tokenize
dask_tokenize.install()
for name, obj in OBJECTS.items():
    digest = hashlib.sha256(graphpickle.dumps(obj, deterministic=True)).hexdigest()
    print(name, digest, tokenize(obj))
assert not EVALUATED, EVALUATED
"""
    )
    first = run_python(textwrap.dedent(code), cwd=tmp_path, env={"PYTHONHASHSEED": "1"})
    second = run_python(textwrap.dedent(code), cwd=tmp_path, env={"PYTHONHASHSEED": "2"})
    assert first == second and len(first.splitlines()) == 9
