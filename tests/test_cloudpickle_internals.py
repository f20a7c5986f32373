"""graphpickle leans on a few private names of cloudpickle. These tests fail
loudly, with the name, when an upgrade moves any of them."""

from __future__ import annotations

import contextlib
import inspect
import tomllib
import weakref
from pathlib import Path

import cloudpickle
import pytest
from cloudpickle import cloudpickle as cp

from graphpickle import _cloudpickle_internals as internals


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


def test_installed_version_is_in_the_supported_range():
    low, high = (part.strip(">=<") for part in internals.SUPPORTED_VERSIONS.split(","))
    assert _version_tuple(low) <= _version_tuple(cloudpickle.__version__) < _version_tuple(high)


def test_pyproject_pins_the_same_range():
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert f"cloudpickle{internals.SUPPORTED_VERSIONS}" in pyproject["project"]["dependencies"]


def test_private_names_exist_with_the_expected_signatures():
    expected = {
        "_function_getstate": ["func"],
        "_function_setstate": ["obj", "state"],
        "_get_cell_contents": ["cell"],
        "_make_function": ["code", "globals", "name", "argdefs", "closure"],
        "_class_reduce": ["obj"],
        "_code_reduce": ["obj"],
        "_dynamic_class_reduce": ["obj"],
        # Deterministic mode replaces the class_tracker_id argument (by position).
        "_make_skeleton_class": [
            "type_constructor",
            "name",
            "bases",
            "type_kwargs",
            "class_tracker_id",
            "extra",
        ],
        "_make_skeleton_enum": [
            "bases",
            "name",
            "qualname",
            "members",
            "module",
            "class_tracker_id",
            "extra",
        ],
        "_method_reduce": ["obj"],
        "_decompose_typevar": ["obj"],
        "subimport": ["name"],
        "dynamic_subimport": ["name", "vars"],
    }
    for name, params in expected.items():
        assert list(inspect.signature(getattr(cp, name)).parameters) == params, name
    getnewargs = cp.Pickler._function_getnewargs
    assert list(inspect.signature(getnewargs).parameters) == ["self", "func"]
    # The only pickler attribute it reads:
    assert "globals_ref" in inspect.getsource(getnewargs)
    assert isinstance(cp._PICKLE_BY_VALUE_MODULES, set)
    # Registering a class id must not keep the class alive.
    assert isinstance(cp._DYNAMIC_CLASS_TRACKER_BY_ID, weakref.WeakValueDictionary)
    assert internals.REGISTERED_BY_VALUE is cp._PICKLE_BY_VALUE_MODULES


def test_type_reducer_table_is_the_expected_one():
    names = {cls.__name__ for cls in internals.TYPE_REDUCERS}
    assert {
        "classmethod",
        "staticmethod",
        "property",
        "cell",
        "mappingproxy",
        "dict_keys",
        "dict_values",
        "dict_items",
        "WeakSet",
        "getset_descriptor",
    } <= names
    # Types graphpickle reduces itself, or leaves to the standard library:
    assert not names & {
        "function",
        "type",
        "module",
        "method",
        "memoryview",
        "Logger",
        "TypeVar",
        "code",
    }


def test_function_reduction_shape():
    def f(x):
        return x

    class Holder:
        def __init__(self):
            self.globals_ref = {}

    reduction = internals.reduce_function_by_value(Holder(), f)
    assert reduction[0] is cp._make_function
    assert reduction[5] is cp._function_setstate
    _state, slotstate = reduction[2]
    assert "__globals__" in slotstate and "__closure__" in slotstate
    assert "_cloudpickle_submodules" in slotstate  # sorted in deterministic mode


def test_canonical_class_reduction_names_the_class_as_told():
    import enum

    class Local:
        def method(self):
            return 1

    class Colour(enum.Enum):
        RED = 1

    for cls in (Local, Colour):
        tracker_id = f"graphpickle-test-{cls.__name__}"
        default = internals.reduce_class_by_value(cls)
        canonical = internals.reduce_class_by_value(cls, canonical=True, tracker_id=tracker_id)
        assert canonical[0] is default[0]
        assert tracker_id in canonical[1] and tracker_id not in default[1]
        # (..., class_tracker_id, extra)
        assert canonical[1].index(tracker_id) == len(canonical[1]) - 2
        rebuilt = default[0](*canonical[1])
        assert rebuilt.__name__ == cls.__name__


def test_class_tracking_finds_the_class_by_its_id():
    class Tracked:
        pass

    internals.track_class("graphpickle-test-id", Tracked)
    skeleton = cp._make_skeleton_class(type, "Tracked", (object,), {}, "graphpickle-test-id", None)
    assert skeleton is Tracked


def test_the_submodule_search_over_a_snapshot_is_cloudpickles():
    # A remembered reduction's submodules are checked with submodules_in, over a
    # snapshot of sys.modules: it must find what cloudpickle's own search finds.
    import email.mime.text
    import sys
    import xml.dom.minidom

    from graphpickle.core.snapshots import modules_items

    def parse():
        return xml.dom.minidom, email.mime.text, xml.sax

    cases = [
        (parse.__code__, [xml, email, sys]),
        (parse.__code__, [xml.dom, email.mime]),
        (parse.__code__, [1, "xml", None]),
        ((lambda: os.path.join).__code__, [inspect, tomllib]),  # noqa: F821
    ]
    for code, dependencies in cases:
        expected = cp._find_imported_submodules(code, dependencies)
        found = internals.submodules_in(code, dependencies, modules_items())
        assert found == expected and all(a is b for a, b in zip(found, expected, strict=True))
    assert internals.submodules_in(parse.__code__, [xml], modules_items())  # not vacuous


def test_code_global_names_are_what_the_function_state_holds():
    def f():
        return G_ONE, G_TWO  # noqa: F821

    namespace = {"G_ONE": 1, "G_TWO": 2}
    g = type(f)(f.__code__, namespace)
    _state, slotstate = cp._function_getstate(g)
    assert tuple(slotstate["__globals__"]) == internals.code_global_names(f.__code__)


def test_the_state_of_deferred_annotations_is_cloudpickles_but_for_them():
    # 3.14's deferred annotations travel as their __annotate__, in a state built
    # as _function_getstate builds its own: the same slots, values and copies.
    import xml
    import xml.dom

    captured = [1]

    def f(x: int = 1, *, k: str = "k") -> int:
        return len(captured) + len(xml.dom.__name__) + x

    f.attribute = "a"
    state, slotstate = cp._function_getstate(f)
    ours_state, ours = internals._deferred_function_state(f, len, False)
    assert ours_state == state
    assert list(ours) == [k if k != "__annotations__" else "__annotate__" for k in slotstate]
    assert ours.pop("__annotate__") is len
    assert slotstate.pop("__annotations__") is f.__annotations__
    assert ours == slotstate
    assert ours["_cloudpickle_submodules"] == [xml.dom]


def _functions_of_every_shape():
    """Functions whose reductions fill each slot of cloudpickle's state."""
    import math

    counter = 0

    def closure(x, *, step=1):
        nonlocal counter
        counter += step
        return x + counter + math.floor(0.5)

    def with_empty_cell():
        return later

    def annotated(x: int, y: "list[str]" = ()) -> float:  # noqa: UP037
        """A docstring."""
        return float(x)

    annotated.tag = ["an", "attribute"]
    annotated.__kwdefaults__ = None
    lam = lambda a, b=(1, 2): (a, b)  # noqa: E731
    if False:
        later = None
    return [closure, with_empty_cell, annotated, lam, _functions_of_every_shape]


def test_making_a_function_as_loaded_is_cloudpickles():
    # make_function_as_loaded (what a code block's receiver runs) against
    # cloudpickle's _make_function + _function_setstate, on the very same parts.
    for func in _functions_of_every_shape():
        reduction = internals.reduce_function_by_value(
            type("Holder", (), {"globals_ref": {}})(), func
        )
        _, (code, base, _, _, closure), state, _, _, _ = reduction
        theirs_globals, ours_globals = dict(base), dict(base)
        theirs = cp._make_function(code, theirs_globals, None, None, closure)
        attributes, slots = state
        cp._function_setstate(theirs, (dict(attributes), dict(slots)))
        ours = internals.make_function_as_loaded(
            code, ours_globals, closure, dict(attributes), tuple(slots), tuple(slots.values())
        )
        for name in (
            "__name__", "__qualname__", "__module__", "__doc__", "__defaults__",
            "__kwdefaults__", "__annotations__", "__dict__", "__code__",
        ):  # fmt: skip
            assert getattr(ours, name) == getattr(theirs, name), (func, name)
        assert ours_globals == theirs_globals
        assert ours.__globals__ is ours_globals and theirs.__globals__ is theirs_globals
        for mine, other in zip(ours.__closure__ or (), theirs.__closure__ or (), strict=True):
            try:
                expected = other.cell_contents
            except ValueError:
                with pytest.raises(ValueError):
                    mine.cell_contents  # noqa: B018
            else:
                assert mine.cell_contents is expected


class _Counting(type):
    made = 0

    def __init__(cls, *args, **kwargs):
        _Counting.made += 1
        super().__init__(*args, **kwargs)


class _CountsSubclasses:
    made = 0

    def __init_subclass__(cls, **kwargs):
        _CountsSubclasses.made += 1
        super().__init_subclass__(**kwargs)


class _Plain:
    pass


def _skeleton_cases():
    """(metaclass, bases, type_kwargs, the counter that a skeleton made moves, and
    whether a tracked class is found without one)."""
    module = {"__module__": "__main__"}
    count_meta = (_Counting, "made")
    count_sub = (_CountsSubclasses, "made")
    return [
        (type, (object,), dict(module), None, True),
        (type, (_Plain,), dict(module), None, True),
        (type, (object,), {}, None, True),
        (_Counting, (object,), dict(module), count_meta, False),
        (type, (_CountsSubclasses,), dict(module), count_sub, False),
        (type, (object,), {"__module__": "__main__", "__dict__": property(id)}, None, False),
        (type, (_Plain, object), dict(module), None, False),
        (type, (bool,), dict(module), None, False),
    ]


@pytest.mark.parametrize("case", range(len(_skeleton_cases())))
def test_a_tracked_class_is_found_as_cloudpickle_finds_it(case):
    # make_skeleton_class_as_loaded (blocks.make_class) against cloudpickle's
    # _make_skeleton_class: the same class, or the same error, and a skeleton
    # made (with what making it runs) whenever making it could be seen.
    metaclass, bases, type_kwargs, counter, skips = _skeleton_cases()[case]
    try:
        tracked = metaclass("Tracked", bases, dict(type_kwargs))
    except TypeError:
        tracked = type("Tracked", (object,), {})  # bool cannot be subclassed
    tracker_id = f"graphpickle-skeleton-test-{case}"
    internals.track_class(tracker_id, tracked)
    results = []
    for make in (cp._make_skeleton_class, internals.make_skeleton_class_as_loaded):
        before = getattr(*counter) if counter else 0
        try:
            made = make(metaclass, "Tracked", bases, dict(type_kwargs), tracker_id, None)
        except TypeError as exc:
            made = type(exc)
        results.append((made, (getattr(*counter) if counter else 0) - before))
        if made is tracked:
            assert cp._DYNAMIC_CLASS_TRACKER_BY_CLASS[tracked] == tracker_id
    assert results[0] == results[1]
    assert (results[0][0] is tracked) == (bases != (bool,))
    if counter:
        assert results[1][1] == 1, "the skeleton, with what making it runs, was not made"
    # Without the skip, the fallback is cloudpickle's function itself:
    calls = []
    real = cp._make_skeleton_class

    def spy(*args):
        calls.append(args)
        return real(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cp, "_make_skeleton_class", spy)
        with contextlib.suppress(TypeError):
            internals.make_skeleton_class_as_loaded(
                metaclass, "Tracked", bases, dict(type_kwargs), tracker_id, None
            )
    assert (not calls) == skips


def test_an_untracked_class_gets_cloudpickles_skeleton_tracked():
    made = internals.make_skeleton_class_as_loaded(
        type, "Fresh", (object,), {"__module__": "__main__"}, "graphpickle-fresh-id", None
    )
    assert made.__name__ == "Fresh" and made.__module__ == "__main__"
    assert cp._DYNAMIC_CLASS_TRACKER_BY_ID["graphpickle-fresh-id"] is made
    again = internals.make_skeleton_class_as_loaded(
        type, "Fresh", (object,), {"__module__": "__main__"}, "graphpickle-fresh-id", None
    )
    assert again is made
    untracked = internals.make_skeleton_class_as_loaded(type, "Fresh", (object,), {}, None, None)
    assert untracked is not made
