"""By-value reductions remembered between payloads (graphpickle.core.reducers): a
payload always carries the function's and the class's current state."""

from __future__ import annotations

import gc
import importlib
import sys
import warnings

import cloudpickle
import pytest

import graphpickle
from graphpickle.core import policy
from graphpickle.core import reducers as _reducers

CELL = """
G = 1
def f(x=10):
    return G + x + LATER if "LATER" in globals() else G + x
def make(start):
    value = start
    def get():
        return value
    def set_(new):
        nonlocal value
        value = new
    return get, set_
class C:
    attr = 1
    def double(self):
        return self.attr * 2
"""


@pytest.fixture
def cell():
    namespace: dict = {"__name__": "__main__"}
    exec(CELL, namespace)
    return namespace


def assert_remembered(func) -> None:
    """``func`` has an entry, unless every cache is off (GRAPHPICKLE_NO_CACHE=1)."""
    assert (id(func) in _reducers._functions) == _reducers.CACHING


def fresh(obj):
    """The payload of ``obj`` reduced anew, nothing remembered."""
    _reducers.forget_by_value()
    return graphpickle.dumps(obj)


def test_the_second_payload_reuses_the_reduction_and_writes_the_same_bytes(cell):
    f = cell["f"]
    first = graphpickle.dumps(f)
    assert_remembered(f)
    assert graphpickle.dumps(f) == first == fresh(f)


def test_a_rebound_global_and_a_global_defined_later(cell, receiver):
    f = cell["f"]
    graphpickle.dumps(f)
    cell["G"] = 5
    data = graphpickle.dumps(f)
    assert data == fresh(f)
    assert receiver(data, "print(obj())").strip() == "15"
    cell["LATER"] = 100
    data = graphpickle.dumps(f)
    assert receiver(data, "print(obj())").strip() == "115"


def test_changed_defaults_code_and_attributes(cell, receiver):
    f = cell["f"]
    graphpickle.dumps(f)
    f.__defaults__ = (20,)
    assert receiver(graphpickle.dumps(f), "print(obj())").strip() == "21"
    f.tag = "mine"
    assert receiver(graphpickle.dumps(f), "print(obj.tag)").strip() == "mine"
    f.__code__ = (lambda x=0: -x).__code__
    assert receiver(graphpickle.dumps(f), "print(obj())").strip() == "-20"


def test_a_closure_cell_set_between_payloads(cell, receiver):
    get, set_ = cell["make"](1)
    assert receiver(graphpickle.dumps(get), "print(obj())").strip() == "1"
    set_(["a", "list"])
    data = graphpickle.dumps(get)
    assert data == fresh(get)
    assert receiver(data, "print(obj())").strip() == "['a', 'list']"


def test_a_mutated_global_is_written_afresh(cell, receiver):
    cell["G"] = [1]
    f = cell["f"]
    f.__code__ = (lambda: G).__code__  # noqa: F821 (G is the cell's)
    graphpickle.dumps(f)
    cell["G"].append(2)  # same object, new contents
    assert receiver(graphpickle.dumps(f), "print(obj())").strip() == "[1, 2]"


def test_a_class_attribute_set_between_payloads(cell, receiver):
    C = cell["C"]
    check = "print(obj.attr, obj().double(), hasattr(obj, 'extra'))"
    assert receiver(graphpickle.dumps(C), check).split() == ["1", "2", "False"]
    C.attr = 21
    C.extra = True
    data = graphpickle.dumps(C)
    assert data == fresh(C)
    assert receiver(data, check).split() == ["21", "42", "True"]


def test_an_instance_of_a_changed_class(cell, receiver):
    C = cell["C"]
    graphpickle.dumps(C())
    C.double = lambda self: "replaced"
    assert receiver(graphpickle.dumps(C()), "print(obj.double())").strip() == "replaced"


def test_large_captures_warn_in_every_payload(cell):
    cell["G"] = b"x" * 2_000_000
    f = cell["f"]
    for _ in range(2):
        with pytest.warns(graphpickle.LargeCaptureWarning):
            graphpickle.dumps(f)
    assert id(f) not in _reducers._functions


def test_a_lowered_threshold_applies_to_remembered_functions(cell):
    cell["G"] = b"x" * 1000
    f = cell["f"]
    graphpickle.dumps(f)
    previous = graphpickle.get_large_capture_threshold()
    graphpickle.set_large_capture_threshold(100)
    try:
        with pytest.warns(graphpickle.LargeCaptureWarning):
            graphpickle.dumps(f)
    finally:
        graphpickle.set_large_capture_threshold(previous)


def test_deterministic_payloads_do_not_use_remembered_reductions(cell):
    f = cell["f"]
    graphpickle.dumps(f)
    cell["G"] = 7
    assert graphpickle.dumps(f, deterministic=True) == graphpickle.dumps(f, deterministic=True)
    assert b"cloudpickle" in graphpickle.dumps(f, deterministic=True)


def test_entries_go_with_their_objects(cell):
    get, _ = cell["make"](1)
    graphpickle.dumps(get)
    key = id(get)
    assert_remembered(get)
    del get, _
    cell.clear()
    gc.collect()
    assert key not in _reducers._functions


def test_importable_and_registered_functions_are_not_remembered(tmp_path, monkeypatch):
    (tmp_path / "gp_cache_mod.py").write_text("def g():\n    return 1\n")
    monkeypatch.syspath_prepend(tmp_path)
    import gp_cache_mod

    graphpickle.dumps(gp_cache_mod.g)
    assert id(gp_cache_mod.g) not in _reducers._functions
    graphpickle.register_pickle_by_value(gp_cache_mod)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert b"cloudpickle" in graphpickle.dumps(gp_cache_mod.g)
        # Its reason (a registration) can change without its snapshot changing.
        assert id(gp_cache_mod.g) not in _reducers._functions
    finally:
        graphpickle.unregister_pickle_by_value(gp_cache_mod)
    assert b"cloudpickle" not in graphpickle.dumps(gp_cache_mod.g)


SUBMODULE_CELL = """
import xml
def parse():
    return xml.dom.minidom.parseString("<tag/>").documentElement.tagName
"""


def test_a_submodule_imported_between_payloads(monkeypatch, receiver):
    # cloudpickle lists the submodules of a captured package that sys.modules
    # holds when the function is reduced: a remembered list goes out of date.
    import sys

    for name in list(sys.modules):
        if name == "xml.dom" or name.startswith("xml.dom."):
            monkeypatch.delitem(sys.modules, name)
    namespace: dict = {"__name__": "__main__"}
    exec(SUBMODULE_CELL, namespace)
    parse = namespace["parse"]
    graphpickle.dumps(parse)
    assert_remembered(parse)
    importlib.import_module("xml.dom.minidom")

    data = graphpickle.dumps(parse)
    assert b"minidom" in data
    assert data == fresh(parse)
    assert receiver(data, "print(obj())").strip() == "tag"
    # Unrelated imports search again and reuse the reduction; the bytes stay the same.
    parts = _reducers._functions.get(id(parse), {_reducers._PARTS: None})[_reducers._PARTS]
    importlib.import_module("xml.dom.pulldom")

    assert graphpickle.dumps(parse) == data
    if _reducers.CACHING:
        assert _reducers._functions[id(parse)][_reducers._PARTS] is parts


LOCALS_CELL = """
def make_class():
    class Plain:
        attr = 1
        def method(self):
            return self.attr
    return Plain
def make_super_class():
    class Local(dict):
        def get(self, key):
            return super().get(key)
    return Local
def make_recursive(big):
    def rec(n):
        return big if n == 0 else rec(n - 1)
    return rec
def make_closure(big):
    def get():
        return big
    return get
"""


@pytest.mark.parametrize(
    "maker",
    ["make_class", "make_super_class", "make_recursive", "make_closure"],
)
def test_remembered_objects_are_freed(maker):
    # An entry must not keep its object alive: a method's __class__ cell, a
    # closure's own cell or the class's __dict__ descriptor refer back to it.
    import weakref

    namespace: dict = {"__name__": "__main__"}
    exec(LOCALS_CELL, namespace)
    make = namespace[maker]
    obj = make() if "class" in maker else make(bytearray(10))
    ref = weakref.ref(obj)
    data = graphpickle.dumps(obj)
    assert graphpickle.dumps(obj) == data
    if maker == "make_closure":  # no cycle: still remembered
        assert_remembered(obj)
    del obj
    gc.collect()
    assert ref() is None


def test_a_capture_that_grows_in_place_still_warns():
    namespace: dict = {"__name__": "__main__", "data": [0]}
    exec("def uses_data():\n    return len(data)\n", namespace)
    uses_data = namespace["uses_data"]
    before = graphpickle.get_large_capture_threshold()
    graphpickle.set_large_capture_threshold(1000)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graphpickle.dumps(uses_data)
            assert_remembered(uses_data)
            assert not caught
            namespace["data"].extend(range(100_000))
            graphpickle.dumps(uses_data)
            graphpickle.dumps(uses_data)
        assert len(caught) == 2
        assert all(issubclass(w.category, graphpickle.LargeCaptureWarning) for w in caught)
        assert "data" in str(caught[0].message)
    finally:
        graphpickle.set_large_capture_threshold(before)


def test_captures_that_can_grow_are_checked_by_the_c_hook_while_their_sizes_hold(monkeypatch):
    # A function that captures a list (global) and a dict (cell): the C hook
    # answers while their sizes are the remembered ones; a change of size, a
    # capture without a length, or a len() that raises goes to the Python path.
    from graphpickle.core.native import speedups

    if speedups is None or not _reducers.CACHING:
        pytest.skip("needs graphpickle.core._speedups, and functions remembered")

    class Sized:
        def __init__(self):
            self.size, self.error = 1, None

        def __len__(self):
            if self.error is not None:
                raise self.error
            return self.size

    sized = Sized()
    namespace: dict = {"__name__": "__main__", "data": [0], "sized": sized}
    exec(
        "def make(table):\n"
        "    def uses():\n"
        "        return len(data), len(table), len(sized)\n"
        "    return uses\n",
        namespace,
    )
    table = {"a": 1}
    uses = namespace["make"](table)
    first = graphpickle.dumps(uses)
    entry = _reducers._functions[id(uses)]
    assert entry[_reducers._GROWABLE] == (1, 1, 1)
    reused = []
    real_reuse = _reducers._reuse
    monkeypatch.setattr(
        _reducers,
        "_reuse",
        lambda state, g: (g is uses and reused.append(1)) or real_reuse(state, g),
    )
    assert graphpickle.dumps(uses) == first and reused == []  # answered in C
    for change, undo in [
        (lambda: namespace["data"].append(1), lambda: namespace["data"].pop()),
        (lambda: table.update(b=2), lambda: table.pop("b")),
        (lambda: setattr(sized, "size", 5), lambda: setattr(sized, "size", 1)),
    ]:
        change()
        changed = graphpickle.dumps(uses)
        assert reused and changed == fresh(uses)  # the Python path, then a fresh reduction agrees
        undo()
        graphpickle.dumps(uses)  # remembered again: sizes as before
        reused.clear()
        assert graphpickle.dumps(uses) == first and reused == []
    sized.error = ValueError("len() failed")
    with pytest.raises(ValueError, match="len"):
        graphpickle.dumps(uses)  # raised as by the Python path
    sized.error = TypeError("no length now")
    graphpickle.dumps(uses)
    assert reused  # no length: the Python path, every time


def test_code_reductions_remembered_in_default_mode_stay_out_of_deterministic_payloads():
    # The C hook answers a code object from the table of remembered code
    # reductions, in default mode only: a deterministic payload writes its own.
    def local(x):
        return x + 1

    graphpickle.dumps(local)
    graphpickle.dumps(local)  # its code's reduction is remembered, and answered in C
    with_table = graphpickle.dumps(local, deterministic=True)
    _reducers.forget_by_value()
    assert graphpickle.dumps(local, deterministic=True) == with_table
    assert graphpickle.dumps(local) == graphpickle.dumps(local)


def test_the_c_hook_answers_a_remembered_function_as_the_python_handler_does(monkeypatch):
    from graphpickle.core import pickler as _pickler

    if _pickler._speedups is None:
        pytest.skip("graphpickle.core._speedups is not built")
    scale = 3
    square = lambda x: x * x * scale  # noqa: E731  (a lambda: remembered)
    graphpickle.dumps(square)
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is _reducers._reduce_function.__code__:
            calls.append(1)

    sys.setprofile(profile)
    try:
        answered_in_c = graphpickle.dumps(square)
    finally:
        sys.setprofile(None)
    # No Python call: the C hook answered from the table (the handler, with caches off).
    assert (calls == []) == _reducers.CACHING
    monkeypatch.setattr(_pickler, "_speedups", None)
    assert graphpickle.dumps(square) == answered_in_c  # what the Python handler writes


def test_the_c_module_reads_the_layouts_this_package_writes():
    from graphpickle.core import snapshots
    from graphpickle.core.native import speedups

    if speedups is None:
        pytest.skip("graphpickle.core._speedups is not built")
    assert speedups.ENTRY_FIELDS == _reducers.ENTRY_FIELDS
    assert speedups.PARTS_FIELDS == _reducers.PARTS_FIELDS
    assert speedups.SNAPSHOT_FIELDS == snapshots.SNAPSHOT_FIELDS
    assert _reducers._layouts_agree(speedups)


def test_c_and_python_snapshots_and_comparisons_agree(cell):
    from graphpickle.core import snapshots
    from graphpickle.core.native import speedups

    if speedups is None:
        pytest.skip("graphpickle.core._speedups is not built")
    get, _ = cell["make"](1)
    f = cell["f"]
    f.tag = ["attribute"]
    for func in (f, get, lambda: None):
        func.__annotations__  # noqa: B018  (made, as the reducer makes it first)
        names = ("G", "LATER", "nowhere")
        in_c = speedups.function_snapshot(func, names, _reducers._MISSING)
        in_python = snapshots.function_snapshot_in_python(func, names, _reducers._MISSING)
        assert snapshots.same_objects_in_python(in_c, in_python)
        assert speedups.same_objects(in_c, in_python)
    assert not speedups.same_objects((1, tuple([2])), (1, tuple([2])))  # tuples inside: by identity
    assert speedups.same_objects((10**30,), (10**30 + 0,))  # exact ints: by value
    assert not speedups.same_objects((float("1.5"),), (float("1.5"),))  # floats: by identity
    items = snapshots.modules_items()
    assert speedups.same_modules(items) and snapshots.same_modules_in_python(items)
    assert not speedups.same_modules(items[:-2])


def test_sys_modules_items_are_one_tuple_until_sys_modules_changes(monkeypatch):
    # The C module's modules_items is one tuple while sys.modules is the same
    # unchanged dict (its version tag, 3.11; a dict watcher, 3.12+), which
    # same_modules then takes without a walk: every change must end that.
    import types

    from graphpickle.core import snapshots
    from graphpickle.core.native import speedups

    if speedups is None:
        pytest.skip("graphpickle.core._speedups is not built")
    spare, spare_2 = types.ModuleType("gp_modules_items_spare"), types.ModuleType("x")
    changes = [
        lambda: sys.modules.__setitem__("gp_modules_items_spare", spare),  # added
        lambda: sys.modules.__setitem__("gp_modules_items_spare", spare_2),  # replaced
        lambda: sys.modules.pop("gp_modules_items_spare"),  # deleted
        lambda: sys.modules.update(gp_modules_items_spare=spare),  # added by update
        lambda: sys.modules.setdefault("gp_modules_items_spare_2", spare),
        lambda: sys.modules.pop("gp_modules_items_spare_2"),
        lambda: monkeypatch.setattr(sys, "modules", dict(sys.modules)),  # rebound
        lambda: sys.modules.pop("gp_modules_items_spare"),  # in the new dict
    ]
    for change in changes:
        before = speedups.modules_items()
        assert speedups.modules_items() is before and speedups.same_modules(before)
        assert before == snapshots.modules_items_in_python()
        change()
        after = speedups.modules_items()
        assert after is not before and after == snapshots.modules_items_in_python()
        assert speedups.same_modules(after) and snapshots.same_modules_in_python(after)
        assert speedups.same_modules(before) == snapshots.same_modules_in_python(before)
    assert not speedups.same_modules(before)  # the last change removed a module
    monkeypatch.setattr(sys, "modules", _NotADict(sys.modules))
    assert speedups.modules_items() is None  # (the Python function copies it)
    assert snapshots.modules_items() == snapshots.modules_items_in_python()


class _NotADict(dict):
    pass


def test_a_function_that_uses_modules_is_answered_by_the_c_hook(cell, monkeypatch):
    # Its entry depends on sys.modules (cloudpickle lists the submodules it
    # reaches): while sys.modules does not change, the C hook answers it; once
    # it changes, or a module's name does, the Python path checks it again.
    from graphpickle.core.native import speedups

    if speedups is None or not _reducers.CACHING:
        pytest.skip("needs graphpickle.core._speedups, and functions remembered")
    import xml.dom

    cell["G"] = xml
    f = cell["f"]
    f.__code__ = (lambda: G.dom).__code__  # noqa: F821 (G is the cell's)
    first = graphpickle.dumps(f)
    assert_remembered(f)
    assert _reducers._functions[id(f)][_reducers._MODULES] is not None
    reused = []
    real_reuse = _reducers._reuse
    monkeypatch.setattr(
        _reducers, "_reuse", lambda state, g: (g is f and reused.append(g)) or real_reuse(state, g)
    )
    assert graphpickle.dumps(f) == first and reused == []
    monkeypatch.setitem(sys.modules, "gp_hook_spare", None)
    assert graphpickle.dumps(f) == first and reused == [f]  # checked again, still the same
    assert graphpickle.dumps(f) == first and reused == [f]  # remembered with the new sys.modules
    monkeypatch.setattr(xml, "__name__", "renamed")
    renamed = graphpickle.dumps(f)
    assert reused == [f, f] and renamed != first and renamed == fresh(f)


def test_a_remembered_function_never_turns_an_error_into_a_payload(cell):
    # A capture that becomes unpicklable in place, or by a rebinding, fails the
    # next payload as it fails a fresh one; once fixed, the payload comes back.
    import threading

    cell["G"] = [1]
    f = cell["f"]
    f.__code__ = (lambda: G).__code__  # noqa: F821 (G is the cell's)
    graphpickle.dumps(f)
    assert_remembered(f)
    cell["G"].append(threading.Lock())
    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.dumps(f)
    cell["G"].pop()
    graphpickle.dumps(f)
    cell["G"] = threading.Lock()
    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.dumps(f)
    cell["G"] = [2]
    assert graphpickle.loads(graphpickle.dumps(f))() == [2]


def test_the_c_hook_writes_a_module_by_reference_as_the_python_handler_does(monkeypatch):
    # An exact module that sys.modules holds under its __name__, with nothing
    # registered by value, is answered in C (subimport); anything else is
    # asked of the Python handler, which decides.
    import types

    from graphpickle.core.native import speedups

    if speedups is None:
        pytest.skip("graphpickle.core._speedups is not built")
    spare = types.ModuleType("gp_c_module_spare")
    monkeypatch.setitem(sys.modules, "gp_c_module_spare", spare)
    asked = []
    real = _reducers.module_reason
    monkeypatch.setattr(_reducers, "module_reason", lambda m: asked.append(m) or real(m))
    by_reference = graphpickle.dumps(spare)
    assert b"subimport" in by_reference and b"dynamic_subimport" not in by_reference
    assert asked == []  # answered in C
    changes = {
        "another module under its name": lambda patch: patch.setitem(
            sys.modules, "gp_c_module_spare", types.ModuleType("gp_c_module_spare")
        ),
        "renamed": lambda patch: patch.setattr(spare, "__name__", "gp_c_module_renamed"),
        "registered by value": lambda patch: cloudpickle.register_pickle_by_value(spare),
        # Another copy of cloudpickle's registry (Ray's vendored one), added by
        # an integration and written to after: read live, in C too.
        "registered in another registry": lambda patch: (
            policy.add_registry(other),
            other.add("gp_c_module_spare"),
        ),
    }
    other: set[str] = set()
    for label, change in changes.items():
        with monkeypatch.context() as patch:
            change(patch)
            try:
                payload = graphpickle.dumps(spare)
            finally:
                cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES.discard("gp_c_module_spare")
                policy.remove_registry(other)
        assert b"dynamic_subimport" in payload and asked == [spare], label
        asked.clear()
    assert graphpickle.dumps(spare) == by_reference and asked == []


def test_a_function_its_module_does_not_hold_is_remembered_and_asked_again(monkeypatch):
    # Not importable (its module does not hold it under its name): remembered,
    # but the policy decides again at each reuse, in Python; once the module
    # holds it, it goes by reference, and by value again once it does not.
    import types

    if not _reducers.CACHING:
        pytest.skip("the caches are off")
    home = types.ModuleType("gp_not_importable_home")
    monkeypatch.setitem(sys.modules, "gp_not_importable_home", home)
    namespace: dict = {"__name__": "gp_not_importable_home"}
    exec("def helper(x):\n    return x + 1\n", namespace)
    helper = namespace["helper"]
    by_value = graphpickle.dumps(helper)
    assert b"_make_function" in by_value
    entry = _reducers._functions[id(helper)]
    assert entry[_reducers._RECHECK] is True
    asked = []
    real = _reducers.function_reason
    monkeypatch.setattr(
        _reducers, "function_reason", lambda f: (f is helper and asked.append(f)) or real(f)
    )
    assert graphpickle.dumps(helper) == by_value and asked == [helper]  # reused, asked again
    home.helper = helper
    by_reference = graphpickle.dumps(helper)
    assert b"_make_function" not in by_reference and b"gp_not_importable_home" in by_reference
    del home.helper
    assert graphpickle.dumps(helper) == by_value
