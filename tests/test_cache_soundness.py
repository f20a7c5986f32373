"""Remembered reductions never send stale code (graphpickle.core.reducers).

Each scenario runs a sender as ``__main__`` that changes state between
payloads, and loads every payload in a fresh interpreter with plain pickle:
what ``graphpickle.dumps`` and the dask integration's ``dumps`` send must behave
there exactly as a fresh ``cloudpickle.dumps`` of the same objects, at the same
moment, does. Each payload is written twice in a row, so that the second one is
the remembered reduction's (the sender checks that it was remembered).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import textwrap
import types
from pathlib import Path

import pytest
from conftest import run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle.core import reducers

_SENDER_PRELUDE = """
import os, pickle, sys, threading, types, collections, cloudpickle, graphpickle
import graphpickle.integrations.dask_distributed as gpd
from graphpickle.core import reducers as _reducers

from graphpickle.core import connection as _connection

_payloads = []
# One connection to one worker: every row's code-block payloads are written on
# it, in order, each block once (then its digest). A row is one write: its
# blocks count as the worker's once the row is appended (the stream).
_sender = _connection.Sender()
_writing = threading.Lock()

def to_a_worker_that_loads_blocks(obj, session=None):
    token = gpd._CODE_BLOCKS.set(True if session is None else session)
    try:
        return gpd.dumps(obj)
    finally:
        gpd._CODE_BLOCKS.reset(token)

def send(label, obj):
    # Twice each: the second payload reuses what the first remembered. The
    # last two before cloudpickle's need graphpickle to load (code blocks, on
    # one connection).
    session = _sender.session()
    datas = [graphpickle.dumps(obj), graphpickle.dumps(obj), gpd.dumps(obj), gpd.dumps(obj),
             to_a_worker_that_loads_blocks(obj, session),
             to_a_worker_that_loads_blocks(obj, session), cloudpickle.dumps(obj)]
    with _writing:
        _payloads.append((label, datas))
        _sender.commit(session)

def spare_module():
    # A module imported from a file, as far as cloudpickle can tell (it refers
    # to what such a module holds), that no receiver has.
    spare = types.ModuleType("gp_spare")
    spare.__file__ = "gp_spare.py"
    sys.modules["gp_spare"] = spare
    return spare

def remembered(func):
    if not os.environ.get("GRAPHPICKLE_NO_CACHE"):
        assert id(func) in _reducers._functions, func
"""

_SENDER_END = """
with open(sys.argv[1], "wb") as _out:
    pickle.dump(_payloads, _out)
"""

# Loads the payloads of each row, in order, and prints what observe(obj) says of
# each, as JSON. Plain pickle, with graphpickle blocked; a second receiver loads
# those with code blocks (BLOCKS, in rows of seven payloads), which need
# graphpickle (and may have their classes first: the dask worker's loads), in
# the same order (None in each receiver's row for the other's).
_RECEIVER = """
import json, pickle, sys
if {plain}:
    sys.modules["graphpickle"] = None
    load = pickle.loads
else:  # the worker's end of the one connection (core/connection.py)
    from graphpickle.core import connection
    from graphpickle.integrations.dask_distributed import loads as load  # the worker's
    connection.RECEIVER.set(connection.Receiver())
with open(sys.argv[1], "rb") as f:
    payloads = pickle.load(f)
{observe}
def seen_in(data):
    try:
        return repr(observe(load(data)))
    except Exception as exc:
        return f"raised {{type(exc).__name__}}"
print(json.dumps([(label, [seen_in(data) if (len(datas) > {last} and i in {blocks}) != {plain}
                           else None for i, data in enumerate(datas)])
                  for label, datas in payloads]))
"""
BLOCKS = (4, 5)


def exchange(tmp_path: Path, body: str, observe: str, env: dict[str, str] | None = None):
    """Run ``body`` as a sender's ``__main__``, load what it sent elsewhere;
    return ``[(label, [what each payload does])]``: graphpickle.dumps twice,
    the dask integration's dumps twice, then twice to a worker that loads code
    blocks, cloudpickle.dumps last."""
    sender_dir = tmp_path / "sender"
    sender_dir.mkdir()
    payloads = sender_dir / "payloads.pkl"
    code = _SENDER_PRELUDE + textwrap.dedent(body) + _SENDER_END
    run_python(code, str(payloads), cwd=sender_dir, env=env)
    return receive(tmp_path, payloads, observe)


def receive(tmp_path: Path, payloads: Path, observe: str) -> list[tuple[str, list[str]]]:
    where = tmp_path / "receiver"
    where.mkdir(exist_ok=True)
    seen = []
    for plain in (True, False):
        code = _RECEIVER.format(
            observe=textwrap.dedent(observe), blocks=BLOCKS, plain=plain, last=max(BLOCKS) + 1
        )
        seen.append(json.loads(run_python(code, str(payloads), cwd=where)))
    return [
        (label, [a if b is None else b for a, b in zip(plain_row, blocks_row, strict=True)])
        for (label, plain_row), (_, blocks_row) in zip(*seen, strict=True)
    ]


def assert_as_cloudpickle(seen: list[tuple[str, list[str]]]) -> None:
    for label, row in seen:
        *ours, theirs = row
        assert ours == [theirs] * len(ours), (label, row)


CALL = """
def observe(obj):
    return obj()
"""

SCENARIOS = {
    "items of dict and list subclasses": (
        """
        class Items(list):
            pass
        CONFIG = collections.OrderedDict(a=1)
        ITEMS = Items([1])
        class Holder:
            table = collections.OrderedDict(k=1)
        INSTANCE = types.SimpleNamespace(mapping=collections.defaultdict(int, z=1))
        def f(d=collections.OrderedDict(x=1)):
            return (dict(CONFIG), list(ITEMS), dict(d), dict(Holder.table),
                    dict(INSTANCE.mapping))
        send("before", (f, Holder, INSTANCE, ITEMS))
        remembered(f)
        CONFIG["a"] = 2
        ITEMS.append(2)
        f.__defaults__[0]["x"] = 2
        Holder.table["k"] = 2
        INSTANCE.mapping["z"] = 2
        send("after", (f, Holder, INSTANCE, ITEMS))
        """,
        """
        def observe(obj):
            f, holder, instance, items = obj
            return f(), dict(holder.table), dict(instance.mapping), list(items)
        """,
    ),
    "a submodule imported while sys.modules keeps its size": (
        """
        import xml
        for name in [n for n in sys.modules if n.startswith("xml.dom")]:
            del sys.modules[name]
        spare = ["colorsys", "fnmatch", "glob", "gettext", "shlex", "sched", "bisect",
                 "heapq", "numbers", "getopt", "quopri", "codeop", "tabnanny", "netrc"]
        for name in spare:
            __import__(name)
        def parse():
            return xml.dom.minidom.parseString("<tag/>").documentElement.tagName
        send("before", parse)
        remembered(parse)
        size = len(sys.modules)
        import xml.dom.minidom
        for name in spare[: len(sys.modules) - size]:
            del sys.modules[name]
        assert len(sys.modules) == size
        send("after", parse)
        """,
        """
        def observe(obj):
            return obj()
        """,
    ),
    "a change and its reversal between payloads (A, B, A)": (
        """
        A, B = ("a",), ("b",)
        G = A
        SHARED = [1]
        class K:
            attr = A
        def f():
            return (G, list(SHARED), K.attr)
        send("A", f)
        remembered(f)
        G, SHARED[0], K.attr = B, 2, B
        send("B", f)
        G, SHARED[0], K.attr = A, 1, A
        send("A again", f)
        """,
        CALL,
    ),
    "a rebinding while the reduction is built (A, B, A)": (
        # What another thread can do between the snapshot and the reduction,
        # made to happen there every time.
        """
        from graphpickle import _cloudpickle_internals as _cp
        A, B = "a", "b"
        G = A
        def f():
            return G
        real = _cp.reduce_function_by_value
        def meanwhile(*args, **kwargs):
            global G
            G = B
            try:
                return real(*args, **kwargs)
            finally:
                G = A
        _cp.reduce_function_by_value = meanwhile
        graphpickle.dumps(f)
        gpd.dumps(f)
        _cp.reduce_function_by_value = real
        send("after", f)
        """,
        CALL,
    ),
    "a rebinding after the reduction is built": (
        """
        from graphpickle import _cloudpickle_internals as _cp
        G = "old"
        def f():
            return G
        real = _cp.reduce_function_by_value
        def then(*args, **kwargs):
            global G
            reduction = real(*args, **kwargs)
            G = "new"
            return reduction
        _cp.reduce_function_by_value = then
        graphpickle.dumps(f)
        _cp.reduce_function_by_value = real
        send("after", f)
        """,
        CALL,
    ),
    # What another thread can do between two steps of the sender, made to
    # happen there every time: each must leave nothing that a later payload
    # reuses unless a fresh reduction would be the same.
    "__code__ swapped right after its global names were read": (
        """
        from graphpickle import _cloudpickle_internals as _cp
        X = "x"
        def f():
            return X
        def g():
            return X, Y
        real = _cp.code_global_names
        def then(code):
            names = real(code)
            f.__code__ = g.__code__
            return names
        _cp.code_global_names = then
        graphpickle.dumps(f)
        gpd.dumps(f)
        _cp.code_global_names = real
        Y = "y"  # read by the new code only
        send("after", f)
        """,
        CALL,
    ),
    "__module__ changed after the reason was decided": (
        """
        spare = spare_module()
        def f():
            return "f"
        spare.f = f
        real = _reducers.function_reason
        def then(func):
            reason = real(func)
            if func is f:
                f.__module__ = "gp_spare"  # importable now (the receiver has no gp_spare)
            return reason
        _reducers.function_reason = then
        graphpickle.dumps(f)
        gpd.dumps(f)
        _reducers.function_reason = real
        send("after", f)
        """,
        CALL,
    ),
    "__module__ back to __main__ before the answer is remembered": (
        """
        spare = spare_module()
        def f():
            return "f"
        spare.f = f
        f.__module__ = "gp_spare"
        real = _reducers.remember_by_reference
        def meanwhile(obj):
            if obj is f:
                f.__module__ = "__main__"  # and __main__ holds it as f
            real(obj)
        _reducers.remember_by_reference = meanwhile
        graphpickle.dumps(f)
        gpd.dumps(f)
        _reducers.remember_by_reference = real
        send("after", f)
        """,
        CALL,
    ),
    "globals that are a dict subclass": (
        # As LOAD_GLOBAL does, cloudpickle reads such globals through the mapping.
        """
        OVERRIDES = {}
        class Namespace(dict):
            def __getitem__(self, key):
                return OVERRIDES[key] if key in OVERRIDES else dict.__getitem__(self, key)
        namespace = Namespace(__name__="__main__", G="old")
        exec("def f():\\n    return G\\n", namespace)
        f = namespace["f"]
        send("before", f)
        OVERRIDES["G"] = "new"
        send("after", f)
        """,
        CALL,
    ),
    "a captured object that comes to stand for a module": (
        """
        import importlib, xml.dom.minidom
        for name in [n for n in sys.modules if n.startswith("xml.dom")]:
            del sys.modules[name]
        class Proxy:
            target = None
            @property
            def __class__(self):
                return Proxy if Proxy.target is None else types.ModuleType
            def __getattr__(self, name):
                return getattr(Proxy.target, name)
            def __reduce__(self):
                return (importlib.import_module, ("xml",))
        XML = Proxy()
        def parse():
            return XML.dom.minidom.parseString("<tag/>").documentElement.tagName
        send("before", parse)
        import xml.dom.minidom
        Proxy.target = xml
        send("after", parse)
        """,
        CALL,
    ),
    "a function its module comes to hold, then drops": (
        """
        spare = spare_module()
        namespace = {"__name__": "gp_spare"}
        exec("def f():\\n    return 'f'\\n", namespace)
        f = namespace["f"]
        send("not held: by value", f)
        spare.f = f
        send("held: by reference", f)
        del spare.f
        send("dropped: by value again", f)
        """,
        CALL,
    ),
    "sys.modules rebound without the function's module": (
        """
        spare = spare_module()
        exec("def f():\\n    return 'f'\\n", spare.__dict__)
        f = spare.f
        f.__module__ = "gp_spare"
        graphpickle.dumps(f)  # by reference, and remembered so
        gpd.dumps(f)
        import distributed.protocol.serialize  # (now: a rebound sys.modules breaks imports)
        sys.modules = dict(sys.modules)
        del sys.modules["gp_spare"]
        send("after", f)
        """,
        CALL,
    ),
    # Constants marshal cannot write (code.replace, as bytecode rewriters do):
    # no code block can be made, and the code travels as cloudpickle's reduction.
    "code constants that marshal cannot write": (
        """
        import decimal, http
        def f():
            a = "first"
            b = "second"
            return a, b
        consts = {"first": decimal.Decimal("1.5"), "second": http.HTTPStatus.OK}
        f.__code__ = f.__code__.replace(
            co_consts=tuple(consts.get(c, c) if type(c) is str else c for c in f.__code__.co_consts)
        )
        assert f() == (decimal.Decimal("1.5"), http.HTTPStatus.OK), f()
        send("before", f)
        remembered(f)
        send("again", f)
        """,
        CALL,
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_change_between_payloads_reaches_the_receiver(tmp_path, scenario):
    body, observe = SCENARIOS[scenario]
    seen = exchange(tmp_path, body, observe)
    assert len(seen) >= 1
    assert_as_cloudpickle(seen)


def test_the_cache_switch_turns_remembering_off(tmp_path):
    body = """
    def f():
        return 1
    send("one", f)
    assert not _reducers._functions and not _reducers._codes
    """
    seen = exchange(tmp_path, body, CALL, env={"GRAPHPICKLE_NO_CACHE": "1"})
    assert_as_cloudpickle(seen)


IDENTITY = """
T = tuple([1, 2])
def f(x=tuple([3])):
    return T, x
class C:
    number = complex(1, 2)
    span = range(3)
    empty = frozenset()
    def method(self):
        return (1.5, "constant")
send("first", [f, T, f.__defaults__, C, C.number, C.span, C.empty, C.method.__code__])
remembered(f)
T = tuple([1, 2])  # equal, not the same
f.__defaults__ = (tuple([3]),)
send("equal but new", [f, T, f.__defaults__, C, C.number, C.span, C.empty, C.method.__code__])
"""

IDENTITY_OBSERVE = """
def observe(obj):
    f, T, defaults, C, number, span, empty, code = obj
    return (f.__globals__["T"] is T, f.__defaults__ is defaults, C.number is number,
            C.span is span, C.empty is empty, C.method.__code__ is code,
            C.method.__code__.co_consts == code.co_consts, f())
"""


def test_identity_on_the_receiver_is_the_senders(tmp_path):
    seen = exchange(tmp_path, IDENTITY, IDENTITY_OBSERVE)
    assert_as_cloudpickle(seen)
    assert all("True, True, True, True, True, True" in row[-1] for _, row in seen)


def racing_sender(count: int, source: str, change: str, after: str = "") -> str:
    """A sender that makes ``count`` functions ``f`` (and the other functions of
    ``source``) in namespaces of their own, and for each one starts a thread
    that runs ``change`` once, at a moment the sender does not choose, while
    the sender keeps reducing ``f`` afresh (each dump remembers anew); then
    ``after`` runs and ``f`` is sent."""
    return f"""
import random, time
sys.setswitchinterval(1e-6)
random.seed(0)
for i in range({count}):
    namespace = {{"__name__": "__main__", "G": "old", "X": "x"}}
    exec({source!r}, namespace)
    f = namespace["f"]
    def change(namespace=namespace, delay=random.random() * 2e-4):
        time.sleep(delay)
        {change}
    thread = threading.Thread(target=change)
    thread.start()
    while thread.is_alive():
        _reducers.forget_by_value()
        graphpickle.dumps(f)
    thread.join()
    {after}
    send(f"function {{i}}", f)
"""


def test_rebinding_threads_never_leave_a_stale_reduction(tmp_path):
    body = racing_sender(40, "def f():\n    return G\n", 'namespace["G"] = "new"')
    seen = exchange(tmp_path, body, CALL)
    assert len(seen) == 40
    assert_as_cloudpickle(seen)


# --- random changes between payloads -------------------------------------------

_STATE = """
class Items(list):
    pass
A, B = ("a",), ("b",)
G = A
SEQUENCE = Items([1])
MAPPING = collections.OrderedDict(k=1)
def make(value):
    def get():
        return value
    def set_(new):
        nonlocal value
        value = new
    return get, set_
get, set_cell = make(A)
class Holder:
    attr = A
def f(d=collections.OrderedDict(x=1)):
    return (G, list(SEQUENCE), dict(MAPPING), dict(d), get(), Holder.attr,
            getattr(f, "tag", None), f.__kwdefaults__)
"""

_ACTIONS = {
    "rebind to B": "G = B",
    "rebind to A": "G = A",
    "rebind to an equal new tuple": "G = tuple(list(G))",
    "append in place": "SEQUENCE.append(len(SEQUENCE))",
    "set a mapping item": "MAPPING['k'] = MAPPING['k'] + 1",
    "change a default in place": "f.__defaults__[0]['x'] = f.__defaults__[0]['x'] + 1",
    "new defaults": "f.__defaults__ = (collections.OrderedDict(x=-1),)",
    "set a cell": "set_cell(B if get() == A else A)",
    "set a function attribute": "f.tag = len(getattr(f, 'tag', '') or '') * 'x' + 'x'",
    "keyword defaults": "f.__kwdefaults__ = {'k': G}",
    "set a class attribute": "Holder.attr = B if Holder.attr == A else A",
    "new code": "f.__code__ = (lambda d=None: ('new code', G)).__code__",
}


@settings(
    max_examples=int(os.environ.get("GP_CACHE_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.sampled_from(sorted(_ACTIONS)), min_size=1, max_size=8))
def test_random_changes_between_payloads(tmp_path_factory, actions):
    # Every payload, sent after each change, does what cloudpickle's does.
    import cloudpickle

    import graphpickle
    import graphpickle.integrations.dask_distributed as gpd

    namespace: dict = {"__name__": "__main__", "collections": __import__("collections")}
    exec(_STATE, namespace)
    f = namespace["f"]
    payloads = []
    for step, action in enumerate(["send first", *actions]):
        if step:
            exec(_ACTIONS[action], namespace)
        datas = [graphpickle.dumps(f), graphpickle.dumps(f), gpd.dumps(f), gpd.dumps(f)]
        payloads.append((action, [*datas, cloudpickle.dumps(f)]))
    tmp_path = tmp_path_factory.mktemp("random")
    sent = tmp_path / "payloads.pkl"
    sent.write_bytes(pickle.dumps(payloads))
    assert_as_cloudpickle(receive(tmp_path, sent, CALL))


# --- the fast path engages on every declared Python -----------------------------

ENGAGED = """
import dataclasses, sys, types
import graphpickle
import graphpickle.integrations.dask_distributed as gpd
from graphpickle.core import reducers as _reducers
from graphpickle.core.native import speedups

SCALE: int = 3

def scaled(x: int, factor: float = 1.0) -> float:
    return x * SCALE * factor

@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0
    def norm(self) -> float:
        return abs(self.x) + abs(self.y)

square = lambda x: x * x  # noqa: E731

message = [scaled, square, Point(1, 2.0), Point]
for dumps in (graphpickle.dumps, gpd.dumps, graphpickle.dumps):
    dumps(message)
from graphpickle.core.policy import function_reason
# The class's methods that go by value (3.13+ dataclasses also hold the importable
# dataclasses._replace). From 3.14 a class's __annotate__ holds the class namespace,
# which holds the function itself: an entry would keep it alive, so it is reduced
# in every payload.
methods = [v for v in vars(Point).values() if isinstance(v, types.FunctionType)
           and function_reason(v) is not None]
if sys.version_info >= (3, 14) and "annotations" not in globals():
    annotate = [f for f in methods if f.__name__ == "__annotate__"]
    assert len(annotate) == 1 and id(annotate[0]) not in _reducers._functions
    methods.remove(annotate[0])
missing = [f.__qualname__ for f in (scaled, square, *methods) if id(f) not in _reducers._functions]
assert not missing, f"not remembered: {missing}"

# Sent again, every function is answered from its entry, none reduced again:
# by the C hook itself where it is built, unless the entry has submodules or
# growable captures to check (the Python handler checks those).
calls, rebuilt = [], []
def profile(frame, event, arg):
    if event == "call" and frame.f_code is _reducers._reduce_function.__code__:
        calls.append(frame.f_locals.get("func"))
remember = _reducers._remember
_reducers._remember = lambda func, entry: rebuilt.append(func)
sys.setprofile(profile)
try:
    for dumps in (graphpickle.dumps, gpd.dumps):
        dumps(message)
finally:
    sys.setprofile(None)
    _reducers._remember = remember
assert not rebuilt, f"reduced again: {rebuilt}"
# Not remembered by design, so reduced in every payload: from 3.14 an
# __annotate__ of a class or of its methods, which travels with the names it
# reads from the class's dict, copied in each payload. A function not found by
# its names (3.14's dataclasses make an __init__.__annotate__ of their own) is
# remembered, and asked again in Python at each reuse.
reads_class = lambda f: "__classdict__" in f.__code__.co_freevars
by_design = lambda f: reads_class(f) or function_reason(f) not in (
    _reducers._REMEMBERED_REASONS | _reducers._RECHECKED_REASONS)
assert not [f for f in calls if by_design(f) and id(f) in _reducers._functions]
checked = lambda f: by_design(f) or _reducers._functions[id(f)][_reducers._RECHECK] or any(
    _reducers._functions[id(f)][i] is not None for i in (_reducers._MODULES, _reducers._GROWABLE))
if speedups is not None:
    unchecked = [f.__qualname__ for f in calls if not checked(f)]
    assert not unchecked, f"answered in Python: {unchecked}"
print("engaged", len(methods))
"""


@pytest.mark.skipif(bool(os.environ.get("GRAPHPICKLE_NO_CACHE")), reason="the caches are off")
@pytest.mark.parametrize("future", ["", "from __future__ import annotations\n"])
def test_remembered_reductions_are_used_on_this_python(tmp_path, future):
    # Run as a script's __main__, as a notebook's or a script's code is; once
    # with postponed annotations, once without (3.14 builds __annotate__ then).
    out = run_python(future + ENGAGED, cwd=tmp_path)
    assert out.split()[0] == "engaged" and int(out.split()[1]) >= 3


# --- another thread changes what a remembered answer depends on ------------------


def test_code_swapping_threads_never_leave_a_stale_reduction(tmp_path):
    # Hot-reload tools assign __code__ from another thread; Y is read by the new
    # code only, and defined once the thread is done.
    source = "def f():\n    return X\ndef g():\n    return X, Y\n"
    change = 'namespace["f"].__code__ = namespace["g"].__code__'
    body = racing_sender(150, source, change, after='namespace["Y"] = "y"')
    seen = exchange(tmp_path, body, CALL)
    assert len(seen) == 150
    assert_as_cloudpickle(seen)


# A sender whose state another thread changes at random moments, move after
# move, while the main thread keeps dumping; once the thread is done, every
# object is sent, and each payload must do what a fresh reduction of the final
# state does: cloudpickle's, given graphpickle's one registered reducer.
_RACE_SENDER = """
import importlib, io, json, random, time, xml.dom.minidom
import distributed.protocol.serialize  # imported now: a rebound sys.modules breaks imports
moves, seed = json.loads(sys.argv[2])
random.seed(seed)
sys.setswitchinterval(1e-6)

class Base:
    pass
class Registered:
    pass
graphpickle.register_reducer(Registered, lambda obj: (str, ("reduced",)))
class Thing(Base):
    pass
THING = Thing()

SPARE = spare_module()
A, B = ("a",), ("b",)
G = A
def f():
    return G
def f_late():
    return G, LATE
CODES = [f.__code__, f_late.__code__]
SPARE.f = f

OVERRIDES = {}
class Namespace(dict):
    def __getitem__(self, key):
        return OVERRIDES[key] if key in OVERRIDES else dict.__getitem__(self, key)
namespace = Namespace(__name__="__main__", H="h")
exec("def h():\\n    return H\\n", namespace)
h = namespace["h"]

class Proxy:
    target = None
    @property
    def __class__(self):
        return Proxy if Proxy.target is None else types.ModuleType
    def __getattr__(self, name):
        return getattr(Proxy.target, name)
    def __reduce__(self):
        return (importlib.import_module, ("xml",))
XML = Proxy()
def parse():
    return XML.dom.minidom.parseString("<tag/>").documentElement.tagName

MOVES = {
    "rebind G": "G = B if G is A else A",
    "swap __code__": "f.__code__ = CODES[1] if f.__code__ is CODES[0] else CODES[0]",
    "define or delete LATE": "globals().pop('LATE') if 'LATE' in globals() else globals().update(LATE='late')",
    "move __module__": "f.__module__ = 'gp_spare' if f.__module__ == '__main__' else '__main__'",
    "assign __bases__": "Thing.__bases__ = (Registered,) if Thing.__bases__ == (Base,) else (Base,)",
    "override a global": "OVERRIDES.pop('H') if 'H' in OVERRIDES else OVERRIDES.update(H='H')",
    "proxy a module": "Proxy.target = None if Proxy.target is not None else xml",
    "rebind sys.modules": "sys.modules = dict(sys.modules)",
    "drop or restore gp_spare": "sys.modules.pop('gp_spare') if 'gp_spare' in sys.modules else sys.modules.update(gp_spare=SPARE)",
}
objects = {"f": f, "h": h, "parse": parse, "thing": THING}

def change():
    for move in moves:
        time.sleep(random.random() * 1e-4)
        exec(MOVES[move], globals())
thread = threading.Thread(target=change)
thread.start()
while thread.is_alive():
    for obj in objects.values():
        for dumps in (graphpickle.dumps, gpd.dumps):
            try:
                dumps(obj)
            except Exception:
                pass  # a payload of a moment in between: not compared
thread.join()

class Reference(cloudpickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, Registered):
            return (str, ("reduced",))
        return super().reducer_override(obj)

def reference(obj):
    out = io.BytesIO()
    Reference(out, protocol=5).dump(obj)
    return out.getvalue()

def attempt(dumps, obj):
    # (With sys.modules rebound, pickle's own import of a module it writes by
    # reference reads the interpreter's modules, and may fail where the policy's
    # look-up, and cloudpickle's, found the module.)
    try:
        return dumps(obj)
    except Exception as exc:
        return pickle.dumps(f"dumps raised {type(exc).__name__}")

for label, obj in objects.items():
    _payloads.append((label, [attempt(dumps, obj) for dumps in (
        graphpickle.dumps, graphpickle.dumps, gpd.dumps, gpd.dumps,
        to_a_worker_that_loads_blocks, to_a_worker_that_loads_blocks, reference)]))
"""

_RACE_OBSERVE = """
def observe(obj):
    return obj() if callable(obj) else obj if isinstance(obj, str) else type(obj).__name__
"""

_RACE_MOVES = [
    "rebind G", "swap __code__", "define or delete LATE", "move __module__", "assign __bases__",
    "override a global", "proxy a module", "rebind sys.modules", "drop or restore gp_spare",
]  # fmt: skip


@settings(
    max_examples=int(os.environ.get("GP_CACHE_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(st.sampled_from(_RACE_MOVES), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=2**32 - 1),
)
def test_random_changes_from_another_thread(tmp_path_factory, moves, seed):
    tmp_path = tmp_path_factory.mktemp("race")
    sender_dir = tmp_path / "sender"
    sender_dir.mkdir()
    payloads = sender_dir / "payloads.pkl"
    code = _SENDER_PRELUDE + _RACE_SENDER + _SENDER_END
    run_python(code, str(payloads), json.dumps([moves, seed]), cwd=sender_dir)
    assert_as_cloudpickle(receive(tmp_path, payloads, _RACE_OBSERVE))


def test_a_type_whose_bases_change_is_resolved_again(tmp_path):
    # The per-type table: an instance's handler found from its class's MRO.
    body = """
    import io
    class Base:
        pass
    class Registered:
        pass
    graphpickle.register_reducer(Registered, lambda obj: (str, ("reduced",)))
    class Thing(Base):
        pass
    thing = Thing()
    class Reference(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, Registered):
                return (str, ("reduced",))
            return super().reducer_override(obj)
    def reference(obj):
        out = io.BytesIO()
        Reference(out, protocol=5).dump(obj)
        return out.getvalue()
    for label, bases in [("plain", (Base,)), ("registered", (Registered,)), ("plain again", (Base,))]:
        Thing.__bases__ = bases
        _payloads.append((label, [graphpickle.dumps(thing), graphpickle.dumps(thing),
                                  gpd.dumps(thing), gpd.dumps(thing), reference(thing)]))
    """
    seen = exchange(tmp_path, body, _RACE_OBSERVE)
    assert [row[-1] for _, row in seen] == ["'Thing'", "'reduced'", "'Thing'"]
    assert_as_cloudpickle(seen)


# --- what a per-type answer, a pooled pickler and a module check read ----------
#
# In one process, moves change what a remembered answer read besides the
# objects themselves: a class's __module__ (which the dask integration's
# per-type answer reads), the settings a pickler reads from its class when it is
# made (Pickler.dispatch_table, Pickler.persistent_id), and a module whose
# __package__ read imports a submodule (cloudpickle's submodule search reads
# the names before sys.modules). After each move, what graphpickle.dumps and
# the dask integration's dumps write must be, byte for byte, what a fresh
# pickler with a type table of its own writes, no by-value reduction reused.


class _Fresh:
    """Named by a reference pickler's own reducers: it gets a table of its own."""


class _Thing:
    pass


def _thing_by_table(obj):
    return (str, ("by dispatch_table",))


def _thing_by_id(self, obj):
    return "thing" if type(obj) is _Thing else None


class _Importing:
    """A package's module __getattr__ (PEP 562, as lazy packages have): its
    __package__ is not in its dict, and reading it, once armed, imports a
    submodule."""

    armed = False

    @staticmethod
    def getattr(name):
        if name != "__package__":
            raise AttributeError(name)
        if _Importing.armed:
            _Importing.armed = False
            sys.modules["gp_importing.sub"] = types.ModuleType("gp_importing.sub")
        return "gp_importing"


_READ_MOVES = {
    "move the array class's __module__": lambda w: setattr(
        w.Array, "__module__", "numpy.gp" if w.Array.__module__ == __name__ else __name__
    ),
    "set or delete Pickler.dispatch_table": lambda w: w.toggle(
        "dispatch_table", {_Thing: _thing_by_table}
    ),
    "set or delete Pickler.persistent_id": lambda w: w.toggle("persistent_id", _thing_by_id),
    "arm the importing read": lambda w: setattr(_Importing, "armed", True),
    "drop the imported submodule": lambda w: sys.modules.pop("gp_importing.sub", None),
}


class _ReadWorld:
    def __init__(self):
        import numpy

        self.Pickler = graphpickle.Pickler
        self.Array = type("Array", (numpy.ndarray,), {"__module__": __name__})
        self.set: dict[str, object] = {}
        package = types.ModuleType("gp_importing")
        del package.__package__
        package.__getattr__ = _Importing.getattr
        sys.modules["gp_importing"] = package
        namespace = {"__name__": "gp_reads", "gp_importing": package}
        exec("uses_sub = lambda: gp_importing.sub", namespace)
        self.objects = [_Thing(), numpy.arange(3).view(self.Array), namespace["uses_sub"]]

    def toggle(self, name, value):
        if name in self.set:
            delattr(self.Pickler, name)
            del self.set[name]
        else:
            setattr(self.Pickler, name, value)
            self.set[name] = value

    def close(self):
        for name in list(self.set):
            self.toggle(name, None)
        _Importing.armed = False
        for name in ("gp_importing", "gp_importing.sub"):
            sys.modules.pop(name, None)


def _fresh_dumps(obj, lookup):
    """What a new pickler writes, with nothing remembered by any table."""
    kept = dict(reducers._functions)
    reducers._functions.clear()
    try:
        out = io.BytesIO()
        of_its_own = {_Fresh: lambda obj: (str, ())}
        graphpickle.Pickler(out, 5, reducers=of_its_own, reducer_lookup=lookup).dump(obj)
        return out.getvalue()
    finally:
        reducers._functions.clear()
        reducers._functions.update(kept)


@settings(
    max_examples=int(os.environ.get("GP_CACHE_EXAMPLES", "12")) * 3,
    deadline=None,
)
@given(st.lists(st.sampled_from(sorted(_READ_MOVES)), min_size=1, max_size=10))
def test_random_changes_to_what_remembered_answers_read(moves):
    pytest.importorskip("numpy")
    pytest.importorskip("distributed")
    import graphpickle.integrations.dask_distributed as gpd

    world = _ReadWorld()
    try:
        for move in [None, *moves]:
            if move is not None:
                _READ_MOVES[move](world)
            for obj in world.objects:
                for dumps, lookup in (
                    (graphpickle.dumps, None),
                    (gpd.dumps, gpd._dask_serialize_lookup),
                ):
                    # Twice: the second reuses what the first remembered.
                    sent = [dumps(obj), dumps(obj)]
                    assert sent == [_fresh_dumps(obj, lookup)] * 2, (
                        move,
                        type(obj).__name__,
                        dumps,
                    )
    finally:
        world.close()


def test_a_module_name_read_that_imports_is_seen():
    # cloudpickle reads a module's __package__ and __name__, then sys.modules:
    # a read that imports a submodule (here a PEP 562 __getattr__) adds it to
    # the submodules a fresh reduction lists, and a remembered one must too.
    world = _ReadWorld()
    try:
        func = world.objects[-1]
        graphpickle.dumps(func)
        graphpickle.dumps(func)  # remembered, with sys.modules as it is
        _Importing.armed = True
        sent = graphpickle.dumps(func)
        assert "gp_importing.sub" in sys.modules
        assert b"gp_importing.sub" in sent
        assert sent == _fresh_dumps(func, None)
    finally:
        world.close()
