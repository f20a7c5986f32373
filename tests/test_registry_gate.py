"""Modules registered for pickling by value, and everything else: an object goes
by value exactly when its module is registered now, or is under a registered
package, whatever the registry held when the C hook remembered the object; and
an unrelated registration leaves every other object answered by the C hook.

Each test runs on the C hook and (``GRAPHPICKLE_NO_SPEEDUPS=1``) the Python one.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import types

import cloudpickle
import pytest

import graphpickle
from graphpickle._cloudpickle_internals import REGISTERED_BY_VALUE
from graphpickle.core import reducers as _reducers
from graphpickle.core.native import speedups

# A package, its submodule and grandchild, and modules whose names start with
# the package's without being under it.
MODULES = ("gp_reg_a", "gp_reg_a.b", "gp_reg_a.b.c", "gp_reg_ab", "gp_reg_a_b")
# What the registry is set to, in turn: nothing, an unrelated module, each
# module, a parent, a name that is only a prefix of others, a name with dots
# where no module has them.
REGISTRIES = [
    set(),
    {"colorsys"},
    *({name} for name in MODULES),
    {"gp_reg_a", "colorsys"},
    {"gp_reg"},
    {"gp_reg_a.b.c.d"},
    {"gp_reg_a.", "b"},
]


class NameAlike:
    """A registry item that is not a str but compares equal to one (the set's
    lookup runs its ``__eq__``, in C as in Python)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return other == self.name


class ModuleName(str):
    """A ``__module__`` that is a str, but not exactly one."""


@pytest.fixture
def modules(monkeypatch):
    """name -> a module of that name in sys.modules, holding a function ``f`` and a class ``C``."""
    made = {}
    for name in MODULES:
        module = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, module)
        exec("def f():\n    return 1\nclass C:\n    pass\n", module.__dict__)
        made[name] = module
    monkeypatch.setattr(sys.modules["gp_reg_a"], "b", made["gp_reg_a.b"], raising=False)
    saved = set(REGISTERED_BY_VALUE)
    yield made
    REGISTERED_BY_VALUE.clear()
    REGISTERED_BY_VALUE.update(saved)


def registered(module_name: str, registry: set) -> bool:
    """The rule, written out: the name or a parent of it (the text before a dot)."""
    parents = [module_name[:i] for i, char in enumerate(module_name) if char == "."]
    return any(name in registry for name in [module_name, *parents])


def by_value(data: bytes) -> bool:
    """Whether a function, class or module of the payload was pickled by value."""
    return any(
        m in data for m in (b"_make_function", b"_make_skeleton_class", b"dynamic_subimport")
    )


def set_registry(names: set) -> None:
    REGISTERED_BY_VALUE.clear()
    REGISTERED_BY_VALUE.update(names)


def check_every_object(modules: dict, registry: set) -> None:
    for name, module in modules.items():
        expected = registered(name, registry)
        for obj in (module.f, module.C, module):
            for _ in range(2):  # the second from what the first remembered
                assert by_value(graphpickle.dumps(obj)) == expected, (obj, registry)
        # In one payload, beside objects of other modules.
        data = graphpickle.dumps([module.f, module.C, len, int])
        assert by_value(data) == expected, (name, registry)


def test_each_registry_after_each_other(modules):
    # Every ordered pair of registries: what the hook remembered under the first
    # (or under an earlier one) must not decide under the second.
    for before, after in itertools.permutations(REGISTRIES, 2):
        set_registry(before)
        check_every_object(modules, before)
        set_registry(after)
        check_every_object(modules, after)


@pytest.mark.parametrize("how", ["graphpickle", "cloudpickle"])
def test_registration_and_unregistration_through_either_library(modules, how):
    register = {
        "graphpickle": graphpickle.register_pickle_by_value,
        "cloudpickle": cloudpickle.register_pickle_by_value,
    }[how]
    unregister = {
        "graphpickle": graphpickle.unregister_pickle_by_value,
        "cloudpickle": cloudpickle.unregister_pickle_by_value,
    }[how]
    set_registry(set())
    check_every_object(modules, set())
    register(modules["gp_reg_a"])
    check_every_object(modules, {"gp_reg_a"})
    register(modules["gp_reg_a.b"])
    unregister(modules["gp_reg_a"])
    check_every_object(modules, {"gp_reg_a.b"})
    unregister(modules["gp_reg_a.b"])
    check_every_object(modules, set())


def test_a_registry_item_that_is_not_a_str(modules):
    set_registry({NameAlike("gp_reg_a"), 42})
    check_every_object(modules, {"gp_reg_a"})  # (the alike matches, as `in` matches it)
    set_registry({42, b"gp_reg_a"})
    check_every_object(modules, set())


def test_a_module_name_that_is_not_exactly_a_str(modules):
    f = modules["gp_reg_a.b"].f
    set_registry({"colorsys"})
    assert not by_value(graphpickle.dumps(f))  # remembered
    f.__module__ = ModuleName("gp_reg_a.b")
    assert not by_value(graphpickle.dumps(f))
    set_registry({"gp_reg_a"})
    assert by_value(graphpickle.dumps(f))
    f.__module__ = None  # (not importable: by value whatever the registry)
    set_registry(set())
    assert by_value(graphpickle.dumps(f))


def test_a_registry_changed_by_another_thread_between_payloads(modules):
    objects = [modules["gp_reg_a.b"].f, modules["gp_reg_a.b"].C, modules["gp_reg_ab"].f]
    wanted = threading.Event()
    done = threading.Event()
    states = [set(), {"gp_reg_a"}, {"colorsys"}, {"gp_reg_a.b", "colorsys"}, {"gp_reg"}]
    rng = random.Random(7)
    order = [rng.choice(states) for _ in range(40)]

    def change() -> None:
        for names in order:
            wanted.wait()
            wanted.clear()
            set_registry(names)
            done.set()

    thread = threading.Thread(target=change)
    thread.start()
    try:
        for names in order:
            wanted.set()
            assert done.wait(10)
            done.clear()
            for obj in objects:
                assert by_value(graphpickle.dumps(obj)) == registered(obj.__module__, names)
    finally:
        wanted.set()
        thread.join()


def test_a_registry_changed_by_another_thread_at_random_moments(modules):
    # A payload made while the registry held one state from start to end is
    # that state's. A counter tells: odd while a change is under way, and
    # counted in fours (0 mod 4: "gp_reg_a" out, 2 mod 4: in).
    f, cls = modules["gp_reg_a.b"].f, modules["gp_reg_a.b"].C
    changes = [0]
    stop = threading.Event()

    def toggle() -> None:
        while not stop.is_set():
            for change in (REGISTERED_BY_VALUE.add, REGISTERED_BY_VALUE.discard):
                changes[0] += 1
                change("gp_reg_a")
                changes[0] += 1
                # (each state held a moment: the slower pure-Python pickler,
                # switched out only between both changes, once made none "in")
                stop.wait(random.uniform(0, 0.0005))

    set_registry({"colorsys"})
    thread = threading.Thread(target=toggle)
    seen = {False: 0, True: 0}
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread.start()
    try:
        for _ in range(50_000):
            before = changes[0]
            data = graphpickle.dumps([f, cls])
            if changes[0] == before and before % 2 == 0:
                seen[before % 4 == 2] += 1
                assert by_value(data) == (before % 4 == 2)
            if min(seen.values()) >= 200:
                break
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(previous)
    assert min(seen.values()) > 0, seen  # (payloads were made in each state)


@pytest.mark.skipif(speedups is None or not _reducers.CACHING, reason="the C hook's answers")
def test_an_unrelated_registration_leaves_the_c_hook_answering(modules, monkeypatch):
    # Nothing asks the Python policy for an object it found importable, with a
    # module registered that the object is not in (nor under).
    objects = [modules[name].f for name in MODULES] + [modules[name].C for name in MODULES]
    objects += [modules[name] for name in MODULES]
    asked = []
    for reason in ("function_reason", "class_reason", "module_reason"):
        real = getattr(_reducers, reason)
        monkeypatch.setattr(
            _reducers, reason, lambda obj, real=real: asked.append(obj) or real(obj)
        )
    set_registry({"colorsys", "gp_reg_a.b.c.d", "gp_reg"})
    graphpickle.dumps(objects)
    asked.clear()
    assert not by_value(graphpickle.dumps(objects))
    assert asked == []
    REGISTERED_BY_VALUE.add("gp_reg_a.b")  # now some are by value: asked again
    graphpickle.dumps(objects)
    assert {obj.__name__ for obj in asked} >= {"f", "C", "gp_reg_a.b", "gp_reg_a.b.c"}
