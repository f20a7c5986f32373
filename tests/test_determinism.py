"""Deterministic payloads: equal inputs give equal bytes in every process.

The cross-process tests run one script in several interpreters (different
``PYTHONHASHSEED`` values, directories and line positions) and compare what
each wrote; the receiver tests load those payloads side by side in a fresh
interpreter that has neither the sender's ``__main__`` nor graphpickle.
"""

from __future__ import annotations

import io
import json
import pickle
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import run_python
from hypothesis import given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle import determinism
from graphpickle.core import pickler as _pickler
from graphpickle.core.fingerprint import content_dumps
from graphpickle.determinism import canonical

# Everything the issue names, plus instances and sets in every place a set can
# hide: literal constants, globals, closures, class attributes, data, members
# of other sets, and instances inside sets (which takes the pure-Python path).
SCRIPT = """\
{prefix}
import abc, dataclasses, enum, hashlib, json
import graphpickle, graphpickle.wire

WORDS = {{"alpha", "beta", "gamma", "delta", "epsilon"}}
SCALE = 3

def uses_literal_set(word):
    return word in {{"red", "green", "blue", "cyan", "magenta"}}

def uses_globals(word):
    return word in WORDS and len(word) * SCALE

def make_closure():
    seen = frozenset({{"x", "y", "z", "w"}})
    def member(value):
        return value in seen
    return member

def with_default(word, allowed=frozenset({{"p", "q", "r", "s"}})):
    return word in allowed

class Sized(abc.ABC):
    @abc.abstractmethod
    def size(self): ...

# Heap classes: their ids, so a WeakSet's order, vary. The ABC holds them weakly:
# without a strong reference, a garbage collection would drop them.
VIRTUALS = [type(f"Virtual{{index}}", (), {{"size": lambda self: 0}}) for index in range(8)]
for virtual in VIRTUALS:
    Sized.register(virtual)
Sized.register(list)

def is_even(n):
    return True if n == 0 else is_odd(n - 1)

def is_odd(n):
    return False if n == 0 else is_even(n - 1)

class Shape:
    sides = 0
    tags = {{"geometry", "plane", "closed"}}
    def __init__(self, size):
        self.size = size
    @property
    def area(self):
        return self.size ** 2
    def describe(self):
        return f"{{type(self).__name__}}({{self.size}})"

class Square(Shape):
    __slots__ = ()
    sides = 4
    def describe(self):
        return "square " + super().describe()

class Colour(enum.Enum):
    RED = "r"
    GREEN = "g"
    BLUE = "b"

@dataclasses.dataclass(frozen=True)
class Point:
    left: int
    top: int = 0
    labels: frozenset = frozenset()

def make_local_class():
    class Local:
        kinds = {{"a", "b", "c"}}
        def kind_count(self):
            return len(self.kinds)
    return Local

Local = make_local_class()
graphpickle.dumps(Square(1))  # caches Square.__slotnames__ before the payloads

class TagSet(set):
    pass

class TreeNode:
    def __init__(self, name, parent=None):
        self.name, self.parent, self.children = name, parent, set()
        if parent is not None:
            parent.children.add(self)

root = TreeNode("root")
for first in ("a", "b", "c"):
    TreeNode(first + "2", TreeNode(first, root))

objects = {{
    "literal_set_function": uses_literal_set,
    "globals_function": uses_globals,
    "lambda": lambda value: value * SCALE,
    "closure": make_closure(),
    "mutually_recursive": is_even,
    "set_default": with_default,
    "abc_with_registered_classes": Sized,
    "class_with_methods": Square,
    "instances": [Square(2), Shape(3), Point(1, 2, frozenset({{"p", "q", "r"}}))],
    "enum": Colour,
    "enum_member_set": {{Colour.RED, Colour.GREEN, Colour.BLUE}},
    "dataclass": Point,
    "local_class": Local,
    "local_instance": Local(),
    "string_sets": [{{"one", "two", "three", "four"}}, frozenset({{"five", "six", "seven"}})],
    "nested_sets": {{frozenset({{"k1", "k2"}}): {{frozenset({{"a", "b"}}), frozenset({{"c", "d"}})}}}},
    "instances_in_sets": {{Point(1, 2, frozenset({{"a", "b"}})), Point(3, 4, frozenset({{"c", "d"}}))}},
    "set_subclass": TagSet({{"red", "green", "blue", "cyan"}}),
    "tree_with_parent_links": root,
    "graph": {{("task", i): (uses_globals, ("task", i - 1), {{f"dep{{i}}", f"dep{{i + 1}}"}})
              for i in range(50)}},
}}
report = {{}}
message = graphpickle.wire.pack_bytes(objects, key=b"k", compression="lz4", deterministic=True)
report["wire message"] = {{
    "deterministic": hashlib.sha256(message).hexdigest(),
    "fingerprint": graphpickle.fingerprint(objects),
    "default": hashlib.sha256(graphpickle.wire.pack_bytes(objects, key=b"k")).hexdigest(),
}}
for name, obj in objects.items():
    data = graphpickle.dumps(obj, deterministic=True)
    with open(name + ".pkl", "wb") as f:
        f.write(data)
    report[name] = {{
        "deterministic": hashlib.sha256(data).hexdigest(),
        "fingerprint": graphpickle.fingerprint(obj),
        "default": hashlib.sha256(graphpickle.dumps(obj)).hexdigest(),
    }}
print(json.dumps(report))
"""

MOVED = "# The same script, every definition further down the file.\n" + "\n" * 40


def _run(where: Path, seed: str, prefix: str = "") -> dict[str, dict[str, str]]:
    where.mkdir()
    out = run_python(SCRIPT.format(prefix=prefix), cwd=where, env={"PYTHONHASHSEED": seed})
    return json.loads(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """The script run four times: three hash seeds (in three directories), and
    with every definition moved 41 lines down."""
    base = tmp_path_factory.mktemp("determinism")
    return {
        name: (base / name, _run(base / name, seed, prefix))
        for name, seed, prefix in [
            ("seed0", "0", ""),
            ("seed1", "1", ""),
            ("seed2", "4242", ""),
            ("moved", "7", MOVED),
        ]
    }


def test_same_bytes_in_every_process_and_hash_seed(runs):
    reports = [report for _, report in runs.values()]
    first = reports[0]
    assert len(first) == 21
    for report in reports[1:]:
        for name, hashes in first.items():
            assert report[name]["deterministic"] == hashes["deterministic"], name
            assert report[name]["fingerprint"] == hashes["fingerprint"], name


def test_no_path_of_the_senders_machine_in_a_payload(runs):
    for where, _ in runs.values():
        for payload in where.glob("*.pkl"):
            data = payload.read_bytes()
            assert str(where).encode() not in data and b"script.py" not in data, payload


def test_a_traceback_on_the_receiver_names_the_function_and_its_line(tmp_path):
    sender = tmp_path / "sender"
    sender.mkdir()
    run_python(
        """
        import graphpickle

        def checked(x):
            if x < 0:
                raise ValueError("negative")  # the third line of the function
            return x

        with open("checked.pkl", "wb") as f:
            f.write(graphpickle.dumps(checked, deterministic=True))
        """,
        cwd=sender,
    )
    out = run_python(
        """
        import pickle, traceback
        with open("sender/checked.pkl", "rb") as f:
            checked = pickle.load(f)
        try:
            checked(-1)
        except ValueError as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            print(frame.name, frame.lineno, frame.filename)
        """,
        cwd=tmp_path,
    )
    assert out.split() == ["checked", "3", "<dynamic-code>"]


def test_default_payloads_do_vary_so_the_comparison_can_fail(runs):
    reports = [report for _, report in runs.values()]
    varying = {
        name for name in reports[0] if len({report[name]["default"] for report in reports}) > 1
    }
    # Random class ids, hash-ordered sets and line numbers, in default mode:
    assert {"class_with_methods", "string_sets", "literal_set_function", "enum"} <= varying


RECEIVER = """\
import pickle, sys
sys.modules["graphpickle"] = None  # receivers need cloudpickle only
first, second = sys.argv[1], sys.argv[2]

def load(run, name):
    with open(f"{run}/{name}.pkl", "rb") as f:
        return pickle.load(f)

results = {}
Square_a, Square_b = load(first, "class_with_methods"), load(second, "class_with_methods")
results["one_class"] = Square_a is Square_b
instances = load(first, "instances") + load(second, "instances")
results["instances_share_classes"] = (
    type(instances[0]) is type(instances[3]) is Square_a
    and type(instances[2]) is type(instances[5])
)
results["square"] = [instances[0].describe(), instances[0].area, Square_a.sides]
results["point"] = [instances[2].left, instances[2].top, sorted(instances[2].labels)]
Colour_a, Colour_b = load(first, "enum"), load(second, "enum")
members = load(first, "enum_member_set")
results["one_enum"] = Colour_a is Colour_b and Colour_a.RED in members and len(members) == 3
local_a, local_b = load(first, "local_class"), load(second, "local_instance")
results["local"] = [type(local_b) is local_a, local_b.kind_count(), sorted(local_a.kinds)]
Sized = load(first, "abc_with_registered_classes")
results["abc"] = [isinstance([], Sized), isinstance(set(), Sized),
                  Sized is load(second, "abc_with_registered_classes")]
results["functions"] = [
    load(second, "set_default")("q"),
    load(first, "literal_set_function")("cyan"),
    load(first, "globals_function")("gamma"),
    load(second, "lambda")(4),
    load(first, "closure")("z"),
    load(second, "mutually_recursive")(10),
]
nested = load(first, "nested_sets")
key = frozenset({"k1", "k2"})
results["nested"] = nested == {key: {frozenset({"a", "b"}), frozenset({"c", "d"})}}
points = load(second, "instances_in_sets")
results["points"] = sorted((p.left, p.top, sorted(p.labels)) for p in points)
tags = load(first, "set_subclass")
results["set_subclass"] = [type(tags).__name__, sorted(tags)]
root = load(second, "tree_with_parent_links")
results["tree"] = sorted((c.name, sorted(g.name for g in c.children), c.parent is root)
                         for c in root.children)
graph = load(first, "graph")
results["graph"] = [len(graph), sorted(graph[("task", 7)][2]), graph[("task", 7)][0]("beta")]
import json
print(json.dumps(results))
"""


def test_loading_is_correct_and_one_class_per_content(runs, tmp_path):
    first, second = runs["seed0"][0], runs["seed1"][0]
    out = run_python(RECEIVER, str(first), str(second), cwd=tmp_path)
    results = json.loads(out)
    assert results == {
        "one_class": True,
        "instances_share_classes": True,
        "square": ["square Square(2)", 4, 4],
        "point": [1, 2, ["p", "q", "r"]],
        "one_enum": True,
        "local": [True, 3, ["a", "b", "c"]],
        "abc": [True, False, True],
        "functions": [True, True, 15, 12, True, True],
        "nested": True,
        "points": [[1, 2, ["a", "b"]], [3, 4, ["c", "d"]]],
        "graph": [50, ["dep7", "dep8"], 12],
        "set_subclass": ["TagSet", ["blue", "cyan", "green", "red"]],
        "tree": [["a", ["a2"], True], ["b", ["b2"], True], ["c", ["c2"], True]],
    }


def test_a_receiver_that_pickles_what_it_loaded_writes_the_same_bytes(runs, tmp_path):
    first = runs["seed0"][0]
    check = """\
        import gc, json, pathlib, pickle, sys
        import graphpickle
        # A loaded ABC holds its registered classes weakly, as the sender's did: a
        # collection between loading and pickling again would drop them.
        gc.disable()
        changed = []
        for path in sorted(pathlib.Path(sys.argv[1]).glob("*.pkl")):
            data = path.read_bytes()
            if graphpickle.dumps(pickle.loads(data), deterministic=True) != data:
                changed.append(path.stem)
        print(json.dumps(changed))
        """
    out = run_python(textwrap.dedent(check), str(first), cwd=tmp_path, env={"PYTHONHASHSEED": "9"})
    # Every payload: the receiver's strings are other objects than the sender's
    # (it interns attribute names on load, cloudpickle re-applies class dicts),
    # and the bytes do not depend on which equal values are one object.
    assert json.loads(out) == []


def test_different_classes_sharing_a_name_never_merge(tmp_path):
    template = """\
        import sys, graphpickle
        class Task:
            def run(self):
                return {value}
        with open(sys.argv[1], "wb") as f:
            f.write(graphpickle.dumps(Task(), deterministic=True))
        """
    payloads = []
    for value in (1, 2, 1):
        where = tmp_path / f"sender{len(payloads)}"
        where.mkdir()
        run_python(textwrap.dedent(template.format(value=value)), str(where / "p.pkl"), cwd=where)
        payloads.append(where / "p.pkl")
    check = """\
        import pickle, sys
        sys.modules["graphpickle"] = None
        tasks = [pickle.load(open(path, "rb")) for path in sys.argv[1:]]
        print([t.run() for t in tasks], type(tasks[0]) is type(tasks[2]),
              type(tasks[0]) is type(tasks[1]))
        """
    out = run_python(textwrap.dedent(check), *map(str, payloads), cwd=tmp_path)
    assert out.split() == ["[1,", "2,", "1]", "True", "False"]


def _main_function(source: str, **globals_: object) -> types.FunctionType:
    namespace: dict[str, object] = {"__name__": "__main__", **globals_}
    exec(compile(source, "script.py", "exec"), namespace)
    func = namespace["f"]
    assert isinstance(func, types.FunctionType)
    return func


def _det(obj: object) -> bytes:
    return graphpickle.dumps(obj, deterministic=True)


def test_code_remembered_from_earlier_dumps_writes_the_same_bytes(monkeypatch):
    from graphpickle.determinism import canonical as _canonical

    # Two functions whose code shares strings ('alpha', 'x'): a payload writes
    # each string once, whichever code was reduced in an earlier dump.
    namespace: dict[str, object] = {"__name__": "__main__"}
    source = (
        "def f(x):\n    return x in {'alpha', 'beta'} or len(x)\n"
        "def g(x):\n    return f(x) and 'alpha' + x\n"
    )
    exec(compile(source, "script.py", "exec"), namespace)
    both = [namespace["f"], namespace["g"]]
    monkeypatch.setattr(_canonical, "_code_cache", {})
    fresh = _det(both)
    for earlier in ([both[1]], [both[0]], both[::-1]):
        monkeypatch.setattr(_canonical, "_code_cache", {})
        _det(earlier)
        assert _det(both) == fresh
    # (With every cache off, GRAPHPICKLE_NO_CACHE=1, each dump has its own.)
    assert len(_canonical._code_cache) == (2 if _canonical.CACHING else 0)
    monkeypatch.setattr(_canonical, "_MAX_CACHED_CODE", 0)  # a new cache for each dump
    assert _det(both) == fresh
    assert _det(both) == fresh


def test_code_whose_frozenset_orders_by_payload_is_not_remembered():
    from graphpickle.determinism import canonical as _canonical

    # Complex members are ordered by payloads made with the pickler's hooks.
    by_payload = _main_function("def f(x):\n    return x in {1j, 2j, 3j}\n")
    by_value = _main_function("def f(x):\n    return x in {1, 2, 3}\n")
    _det([by_payload, by_value])
    assert id(by_payload.__code__) not in _canonical._code_cache
    assert (id(by_value.__code__) in _canonical._code_cache) == _canonical.CACHING


def test_each_ingredient_of_a_function_changes_its_payload():
    source = "def f(x, k=1):\n    return x + k + G\n"
    base = _det(_main_function(source, G=1))
    assert _det(_main_function(source, G=1)) == base  # defined again: same bytes
    assert _det(_main_function("\n" * 30 + source, G=1)) == base  # moved down
    assert _det(_main_function(source.replace("x + k", "x - k"), G=1)) != base  # code
    assert _det(_main_function(source.replace("k=1", "k=2"), G=1)) != base  # default
    assert _det(_main_function(source, G=2)) != base  # global value
    assert _det(_main_function(source.replace("def f(x, k=1)", "def f(x, *, k=1)"), G=1)) != base

    def closure(value):
        def f(x):
            return x + value

        return f

    assert _det(closure(1)) == _det(closure(1))
    assert _det(closure(1)) != _det(closure(2))  # captured value


def _main_class(source: str) -> type:
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(source, "script.py", "exec"), namespace)
    cls = namespace["C"]
    assert isinstance(cls, type)
    return cls


def test_each_ingredient_of_a_class_changes_its_payload_and_its_id():
    source = "class C:\n    limit = 1\n    def run(self):\n        return self.limit\n"
    base = _det(_main_class(source))
    assert _det(_main_class(source)) == base
    assert _det(_main_class("\n\n\n" + source)) == base
    for changed in (
        source.replace("limit = 1", "limit = 2"),  # class attribute
        source.replace("return self.limit", "return -self.limit"),  # method code
        source.replace("class C:", "class C(Exception):"),  # bases
        source + "    extra = None\n",  # one more attribute
    ):
        assert _det(_main_class(changed)) != base


def test_a_content_payload_writes_no_class_id_and_still_tells_classes_apart():
    from cloudpickle import cloudpickle as cp_module

    # (a content of its own: the tracker keeps the first class of each id)
    source = (
        f"class C:\n    limit = 1\n    tag = {id(object())}\n"
        "    def get(self):\n        return self.limit\n"
    )
    cls = _main_class(source)
    shipped = _det(cls)
    tracker = cp_module._DYNAMIC_CLASS_TRACKER_BY_ID
    # (cloudpickle tracks its own uuid4 for the class too, written nowhere)
    (class_id,) = [
        key for key, value in tracker.items() if value is cls and key.encode() in shipped
    ]
    hashed = content_dumps(cls, [].append)
    assert class_id.encode() not in hashed
    assert len(hashed) < len(shipped)  # the same payload less the id
    assert content_dumps(_main_class(source), [].append) == hashed
    changed = _main_class(source.replace("limit = 1", "limit = 2"))
    assert content_dumps(changed, [].append) != hashed
    loaded = pickle.loads(hashed)
    assert loaded is not cls and loaded().get() == 1  # loads, as a class of its own


def test_content_payloads_made_one_after_another_are_each_their_own():
    # content_dumps reuses its picklers: each call must see its own buffers,
    # the reducers registered now, a fresh pickler after a failure, and keep
    # nothing of what it wrote alive.
    import gc
    import weakref

    first: list[pickle.PickleBuffer] = []
    second: list[pickle.PickleBuffer] = []
    content_dumps(np.arange(3), first.append)
    content_dumps(np.arange(4), second.append)
    assert [bytes(b.raw()) for b in first] == [np.arange(3).tobytes()]
    assert [bytes(b.raw()) for b in second] == [np.arange(4).tobytes()]

    cls = _main_class("class C:\n    pass\n")
    before = content_dumps(cls(), [].append)
    graphpickle.register_reducer(cls, lambda obj: (int, (7,)))
    try:
        assert pickle.loads(content_dumps(cls(), [].append)) == 7
    finally:
        graphpickle.unregister_reducer(cls)
    assert content_dumps(cls(), [].append) == before

    class Fails:
        def __reduce__(self):
            raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        content_dumps([cls(), Fails()], [].append)
    assert content_dumps(cls(), [].append) == before

    class Nested:  # reduces itself through another content payload
        def __reduce__(self):
            return (bytes, (content_dumps(cls(), [].append),))

    assert pickle.loads(content_dumps(Nested(), [].append)) == before

    instance = cls()
    instance.payload = list(range(10))
    ref = weakref.ref(instance)
    content_dumps(instance, [].append)
    del instance
    gc.collect()
    assert ref() is None


def test_a_class_payload_ignores_the_slotnames_cache():
    cls = _main_class("class C:\n    __slots__ = ('a',)\n")
    before, default_before = _det(cls), graphpickle.dumps(cls)
    instance = cls()
    instance.a = 1
    graphpickle.dumps(instance)  # copyreg caches C.__slotnames__
    assert "__slotnames__" in cls.__dict__
    assert _det(cls) == before
    assert graphpickle.dumps(cls) != default_before  # what default mode does


def _rebuilt(spec: object, reverse: bool) -> object:
    """The structure ``spec`` describes, each set built by inserting its members
    in one order or the other (equal sets, possibly different iteration order)."""
    if isinstance(spec, tuple) and spec and spec[0] in ("set", "frozenset"):
        members = [_rebuilt(m, reverse) for m in spec[1]]
        if reverse:
            members.reverse()
        return set(members) if spec[0] == "set" else frozenset(members)
    if isinstance(spec, tuple):
        return tuple(_rebuilt(item, reverse) for item in spec)
    if isinstance(spec, list):
        return [_rebuilt(item, reverse) for item in spec]
    return spec


# No two scalars of different types compare equal (1 == 1.0 would make sets that
# are equal yet hold different objects, rightly written differently).
_scalars = st.one_of(
    st.text(max_size=6),
    st.integers(-50, 50),
    st.binary(max_size=4),
    st.none(),
    st.integers(-50, 50).map(lambda i: i + 0.25),
    st.just(float("nan")),
)
_hashables = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.lists(inner, max_size=6).map(lambda m: ("frozenset", m)),
    ),
    max_leaves=20,
)
_specs = st.recursive(
    st.lists(_hashables, max_size=8).map(lambda m: ("set", m)) | _hashables,
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(_specs)
def test_equal_sets_give_equal_bytes_whatever_their_insertion_order(spec):
    forward, backward = _rebuilt(spec, reverse=False), _rebuilt(spec, reverse=True)
    data = _det(forward)
    assert _det(backward) == data
    loaded = pickle.loads(data)
    if "nan" not in repr(forward):  # NaN != NaN
        assert loaded == forward
    # What was loaded pickles to a fixed point (once equal frozensets met inside
    # sets are one object, which loading makes them):
    again = _det(loaded)
    assert _det(pickle.loads(again)) == again


def test_the_c_and_python_implementations_write_the_same_bytes(monkeypatch):
    objects = _main_class(
        "class C:\n    tags = {'x', 'y', 'z'}\n    def f(self):\n        return 'a' in {'a', 'b'}\n"
    )
    graph = {"cls": objects, "instances": {objects, frozenset({"q", "r"})}, "data": [{1, 9, 17}]}
    with_c = _det(graph)
    monkeypatch.setattr(_pickler, "_speedups", None)
    monkeypatch.setattr(determinism.sets, "_sets", None)
    assert _det(graph) == with_c


def test_sets_keep_their_identity_and_type():
    shared = {"b", "a", "c"}
    frozen = frozenset({"y", "x"})
    graph = {"one": shared, "two": [shared, frozen], "three": (frozen,), "empty": set()}
    loaded = pickle.loads(_det(graph))
    assert loaded == graph
    assert loaded["one"] is loaded["two"][0] and loaded["two"][1] is loaded["three"][0]
    assert type(loaded["one"]) is set and type(loaded["three"][0]) is frozenset
    loaded["one"].add("d")  # a real, mutable set
    assert "d" in loaded["two"][0]


def test_sets_nested_in_instances_inside_sets_take_the_python_path(monkeypatch):
    point = _main_class(
        "import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass C:\n    labels: frozenset\n"
    )
    graph = {point(frozenset({"a", "b", "c"})), point(frozenset({"d", "e"}))}
    taken = []
    python_pass = determinism._python_pass
    monkeypatch.setattr(determinism, "_python_pass", lambda *a: taken.append(1) or python_pass(*a))
    data = _det(graph)
    assert taken == [1]
    assert pickle.loads(data) == graph


def test_a_pickler_gives_the_same_bytes_at_each_dump_and_each_buffer_once():
    array = np.arange(1000, dtype="f8")
    graph = {"array": array, "tags": {"b", "a", "c"}}  # sets: more than one pass
    out = io.BytesIO()
    handed: list[pickle.PickleBuffer] = []
    pickler = graphpickle.Pickler(out, buffer_callback=handed.append, deterministic=True)
    pickler.dump(graph)
    first = out.getvalue()
    assert len(handed) == 1
    pickler.dump(graph)
    assert out.getvalue() == first * 2
    loaded = pickle.loads(first, buffers=handed[:1])
    assert np.array_equal(loaded["array"], array) and loaded["tags"] == {"a", "b", "c"}


def test_deterministic_mode_needs_protocol_4_or_5():
    with pytest.raises(ValueError, match="protocol 4 or 5, got 2"):
        graphpickle.dumps({"a"}, 2, deterministic=True)
    assert pickle.loads(graphpickle.dumps({"b", "a"}, 4, deterministic=True)) == {"a", "b"}


def test_failures_name_the_path_as_in_default_mode():
    import threading

    with pytest.raises(TypeError) as info:
        graphpickle.dumps({"k": [{"a", "b"}, threading.Lock()]}, deterministic=True)
    assert info.value.graphpickle_path == "root['k'][1]"


def test_deterministic_data_with_sets_loads_with_the_data_only_allow_list():
    data = _det({"tags": {"x", "y"}, "frozen": frozenset({1, 2})})
    assert graphpickle.loads(data, allowed=graphpickle.DATA_ONLY) == {
        "tags": {"x", "y"},
        "frozen": frozenset({1, 2}),
    }
    report = graphpickle.inspect(data)
    assert "operator.itemgetter" in report.globals and not report.dangerous
    # Restricted loading hands out only that use of itemgetter: (...)[-1] of a tuple.
    import operator

    for abuse in (
        (operator.itemgetter("key"), ({"key": 1},)),
        (operator.itemgetter(-1), ([1, 2],)),
        (operator.itemgetter(0), ((1, 2),)),
    ):

        class Abuse:
            def __reduce__(self, abuse=abuse):  # type: ignore[no-untyped-def]
                return abuse

        crafted = pickle.dumps(Abuse())
        assert pickle.loads(crafted) is not None  # plain pickle runs it
        with pytest.raises(graphpickle.ForbiddenGlobalError, match="itemgetter"):
            graphpickle.loads(crafted, allowed=graphpickle.DATA_ONLY)


def test_fingerprint_covers_out_of_band_buffers():
    array = np.arange(100_000, dtype="i4")
    same = array.copy()
    changed = array.copy()
    changed[50_000] = -1
    assert graphpickle.fingerprint(array) == graphpickle.fingerprint(same)
    assert graphpickle.fingerprint(array) != graphpickle.fingerprint(changed)
    assert graphpickle.fingerprint(array) != graphpickle.fingerprint(array.view("u4"))
    assert graphpickle.fingerprint({"a", "b"}) == graphpickle.fingerprint({"b", "a"})
    assert len(graphpickle.fingerprint(None)) == 64


class _Node:
    """An importable class whose instances hold sets (pickled by reference)."""

    def __init__(self, tags: set[str] | frozenset[str]) -> None:
        self.tags = tags

    def __eq__(self, other: object) -> bool:
        return type(other) is _Node and other.tags == self.tags

    def __hash__(self) -> int:
        return hash(frozenset(self.tags))


class _Holder:
    """An importable class, hashed by identity, holding any value."""

    def __init__(self, value: object) -> None:
        self.value = value


def test_sets_written_before_their_wrapper_keep_the_memo_right():
    # The small sets inside the nodes are written by the C pickler while the
    # outer set's members are; the memo must not count them twice.
    shared = ["shared"]
    obj = {"nodes": {_Node({"a"}), _Node({"b"})}, "x": shared, "y": shared}
    loaded = pickle.loads(_det(obj))
    assert loaded == obj and loaded["x"] is loaded["y"]
    seq = [1]
    obj2 = [frozenset({_Node({"z"}), _Node(set())}), frozenset({"q"}), {"x", "y"}, seq, seq]
    loaded2 = pickle.loads(_det(obj2))
    assert loaded2 == obj2 and loaded2[3] is loaded2[4]


def test_nested_sets_of_objects_cost_polynomial_time(monkeypatch):
    made = []
    member_payload = canonical.member_payload
    monkeypatch.setattr(
        canonical, "member_payload", lambda s, m: made.append(1) or member_payload(s, m)
    )
    node: object = "leaf"
    for level in range(32):  # a set holding an object holding the previous set
        node = {_Holder(node), f"x{level}"}
    pickler = graphpickle.Pickler(io.BytesIO(), deterministic=True)
    pickler.dump(node)
    assert len(made) < 32 * 32  # 2**32 without remembering orders


def test_trees_whose_nodes_point_at_their_parent_fail_clearly_when_deep():
    class Tree:
        def __init__(self, parent: Tree | None = None) -> None:
            self.parent, self.children = parent, set()
            if parent is not None:
                parent.children.add(self)

    root = Tree()
    level = [root]
    for _ in range(6):
        level = [Tree(node) for node in level for _ in range(2)]
    assert pickle.loads(graphpickle.dumps(root)).children  # default mode is fine
    with pytest.raises(graphpickle.PicklingError, match="cannot order the sets holding"):
        _det(root)


def test_a_subclass_hooks_apply_to_every_pass():
    import threading

    class Handle:  # by value: the secret must not be in its code
        def __init__(self, secret: set[str]) -> None:
            self.secret = secret
            self.lock = threading.Lock()

    secret = {"s3cr3t-" + "token", "other"}

    class Keeper(graphpickle.Pickler):
        def persistent_id(self, obj: object) -> object:
            return "handle" if isinstance(obj, Handle) else None

    out = io.BytesIO()
    Keeper(out, deterministic=True).dump([Handle(secret), {"x", "y"}, {"z", "w"}])
    assert b"s3cr3t" not in out.getvalue()

    table = {Handle: lambda h: (Handle, (set(),))}
    out = io.BytesIO()
    pickler = graphpickle.Pickler(out, deterministic=True)
    pickler.dispatch_table = table
    pickler.dump([Handle(secret), {"x", "y"}])
    assert b"s3cr3t" not in out.getvalue()


def test_listing_sets_does_not_copy_out_of_band_buffers():
    import tracemalloc

    arrays = [np.ones(250_000) for _ in range(20)]  # 40 MB
    graph = {"arrays": arrays, "tags": {"a", "b"}}
    handed: list[pickle.PickleBuffer] = []
    tracemalloc.start()
    data = graphpickle.dumps(graph, buffer_callback=handed.append, deterministic=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(handed) == 20 and peak < 5_000_000
    assert pickle.loads(data, buffers=handed)["tags"] == {"a", "b"}


def test_equal_frozensets_merge_only_when_made_of_plain_values():
    a, b = _Node({"x"}), _Node({"y"})
    plain = [frozenset({1, 2}), frozenset({1, 2}), {"p", "q"}]
    loaded = pickle.loads(_det(plain))
    assert loaded[0] is loaded[1]  # merged (documented)
    distinct = [frozenset({a}), frozenset({b}), {"p", "q"}]
    loaded = pickle.loads(_det(distinct))
    assert loaded[0] is not loaded[1] and loaded == distinct


def test_a_deterministic_pickler_keeps_nothing_of_its_last_dump():
    array = np.arange(10.0)
    pickler = graphpickle.Pickler(io.BytesIO(), buffer_callback=[].append, deterministic=True)
    pickler.dump({"array": array, "tags": {"a", "b"}})
    assert pickler._passes.pass_buffers == [] and pickler._passes.pass_output.getvalue() == b""


class _Fresh:
    """Its state holds a set made anew at each pickling (freed right after)."""

    def __init__(self, name: str, pairs: list[tuple[int, str]]) -> None:
        self.name, self.pairs = name, pairs

    def __getstate__(self) -> dict[str, object]:
        return {"name": self.name, "pairs": set(self.pairs)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.name, self.pairs = state["name"], sorted(state["pairs"])  # type: ignore[call-overload]


def test_orders_are_never_taken_from_a_freed_set_with_the_same_id():
    objs = {_Fresh(f"n{i}", [(i, "a"), (i, "b"), (i, "c")]) for i in range(20)}
    loaded = pickle.loads(_det(objs))
    assert sorted((o.name, o.pairs) for o in loaded) == sorted(
        (o.name, sorted(o.pairs)) for o in objs
    )


def test_members_shared_by_many_sets_are_keyed_once():
    import enum

    class Perm(enum.Flag):
        R = 1
        W = 2

    common = _Holder("common")
    for graph in (
        [{Perm.R, Perm.W} for _ in range(100)],
        [{"types": {int, float}} for _ in range(100)],
        [{common, _Holder(i)} for i in range(100)],
    ):
        assert len(pickle.loads(_det(graph))) == 100


def test_a_persisted_set_is_neither_written_nor_listed():
    import threading

    secret = {"s3cr3t-" + "token", "other", threading.Lock()}

    class Keeper(graphpickle.Pickler):
        def persistent_id(self, obj: object) -> object:
            return "SECRET" if obj is secret else None

    out = io.BytesIO()
    Keeper(out, deterministic=True).dump({"s": secret, "tags": {"x", "y"}})
    assert b"s3cr3t" not in out.getvalue()


class _Registry:
    def __init__(self) -> None:
        self.index: dict[_Item, int] = {}


class _Item:
    """Hashed by its state: it must be whole before a dict keys on it."""

    def __init__(self, name: str, registry: _Registry) -> None:
        self.name, self.registry = name, registry
        registry.index[self] = len(registry.index)

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Item) and other.name == self.name


def test_objects_in_sets_are_rebuilt_in_the_order_default_mode_rebuilds_them():
    registry = _Registry()
    graph = {"registry": registry, "selected": {_Item("a", registry), _Item("b", registry)}}
    loaded = pickle.loads(_det(graph))
    assert {item.name for item in loaded["selected"]} == {"a", "b"}
    assert sorted(item.name for item in loaded["registry"].index) == ["a", "b"]


def test_fast_mode_is_refused_clearly():
    pickler = graphpickle.Pickler(io.BytesIO(), deterministic=True)
    pickler.fast = True
    with pytest.raises(ValueError, match="fast mode"):
        pickler.dump({"a": {"x", "y"}})


# What the deep-graph scripts below start with: a linked chain of n objects.
_CHAINS = """\
import sys, pickle, graphpickle
class Node:
    def __init__(self, nxt):
        self.nxt = nxt
def chain(n):
    head = None
    for _ in range(n):
        head = Node(head)
    return head
"""


def _run_with_chains(code: str, tmp_path: Path) -> str:
    return run_python(_CHAINS + textwrap.dedent(code), cwd=tmp_path)


def test_deep_graphs_with_a_raised_recursion_limit_do_not_crash(tmp_path):
    # Up to 3.11, plain pickle segfaults here without a deeper stack; so would the
    # deterministic mode's Python passes: graphpickle runs them on a deep stack.
    # From 3.12 the C passes stop at the C recursion limit (~500 nested objects
    # on 3.12, 3333 on 3.13), which no recursion limit or stack changes: the
    # same graph is a clear error, never a crash.
    code = """\
        sys.setrecursionlimit(10**6)
        graph = {chain(20000), chain(20000)}
        try:
            data = graphpickle.dumps(graph, deterministic=True)
        except graphpickle.PicklingError as exc:
            assert "deep recursion" in str(exc), exc
            print("clear error")
        else:
            print(len(pickle.loads(data)))
        """
    expected = ["clear error"] if sys.version_info >= (3, 12) else ["2"]
    assert _run_with_chains(code, tmp_path).splitlines() == expected


def test_a_raised_recursion_limit_still_deepens_the_python_pass(tmp_path):
    # Sets of objects take the pure-Python pickler, which needs ~5 Python frames
    # per level of objects: under the default limit a chain of 300 objects in a
    # set fails there (the C passes follow it: 332 levels on 3.11, ~500 on 3.12,
    # 3333 on 3.13). A raised limit lets it through on every version (from 3.12,
    # Python frames take no C stack, so no helper thread is needed for that).
    code = """\
        graph = {chain(300), chain(300)}
        try:
            graphpickle.dumps(graph, deterministic=True)
        except graphpickle.PicklingError as exc:
            assert "deep recursion" in str(exc), exc
            print("clear error")
        sys.setrecursionlimit(10**6)
        print(len(pickle.loads(graphpickle.dumps(graph, deterministic=True))))
        """
    assert _run_with_chains(code, tmp_path).splitlines() == ["clear error", "2"]


def test_closures_sharing_a_cell_repickle_to_the_same_bytes():
    # Functions made together share closure cells (3.13's dataclasses make a
    # frozen class's __setattr__ and __delattr__ so); loaded functions never do,
    # so deterministic payloads write each function's cells as copies.
    namespace: dict = {"__name__": "graphpickle_test_not_importable"}
    exec(
        "def make():\n"
        "    count = 0\n"
        "    def get():\n"
        "        return count\n"
        "    def bump():\n"
        "        nonlocal count\n"
        "        count += 1\n"
        "    return get, bump\n"
        "pair = make()\n",
        namespace,
    )
    pair = namespace["pair"]
    assert pair[0].__closure__[0] is pair[1].__closure__[0]
    data = graphpickle.dumps(pair, deterministic=True)
    get, bump = pickle.loads(data)
    assert get.__closure__[0] is not bump.__closure__[0]  # cloudpickle's receivers
    assert graphpickle.dumps((get, bump), deterministic=True) == data


def test_static_attributes_give_the_same_bytes_shared_or_copied():
    # 3.13 records the names a class's methods assign on self, sorted (so alike
    # under any hash seed), as the interned strings its instances' attribute
    # names are; a receiver's loaded copies are not. The last stage writes
    # equal strings once either way (determinism/values.py).
    class Holder:
        def __init__(self):
            self.beta = self.alpha = 1

    payload = graphpickle.dumps(Holder(), deterministic=True)
    if sys.version_info >= (3, 13):
        assert Holder.__static_attributes__ == ("alpha", "beta")
        Holder.__static_attributes__ = tuple("".join(name) for name in ("alpha", "beta"))
    assert graphpickle.dumps(Holder(), deterministic=True) == payload


def test_a_spawned_child_writes_what_its_parent_writes(tmp_path):
    # A child started with spawn names the parent's script __mp_main__;
    # deterministic payloads write it as __main__, so both give the same bytes.
    out = run_python(
        """
        import dataclasses, enum, multiprocessing, graphpickle

        OFFSET = 3

        @dataclasses.dataclass
        class Point:
            x: int
            y: int = 0

        class Colour(enum.Enum):
            RED = 1

        def shift(p):
            return Point(p.x + OFFSET)

        def fingerprints():
            objects = [shift, Point, Point(1, 2), Colour, Colour.RED, lambda: shift(Point(0))]
            return [graphpickle.fingerprint(obj) for obj in objects], shift.__module__

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                child, child_module = pool.apply(fingerprints)
            parent, _ = fingerprints()
            print(child_module, [a == b for a, b in zip(parent, child, strict=True)])
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "__mp_main__ [True, True, True, True, True, True]"


def test_a_submodule_entry_that_is_no_module(monkeypatch):
    # cloudpickle's submodule search matches sys.modules keys: what it finds
    # under them need not be a module, nor have a __name__. Deterministic
    # dumps order what it found by those keys, not by import order.
    import xml
    import xml.dom

    namespace = {"__name__": "__main__", "xml": xml}
    exec("def f():\n    return xml.dom if xml else fake\n", namespace)  # its names: dom, fake
    f = namespace["f"]
    monkeypatch.setitem(sys.modules, "xml.fake", 3)
    payload = graphpickle.dumps(f, deterministic=True)
    assert pickle.loads(payload)() is xml.dom
    monkeypatch.delitem(sys.modules, "xml.dom")
    monkeypatch.setitem(sys.modules, "xml.dom", xml.dom)  # now after xml.fake
    assert graphpickle.dumps(f, deterministic=True) == payload
