"""CPython's own pickle tests, run against pickle and against graphpickle.

CPython tests its C pickler with ``Lib/test/test_pickle.py``: classes such as
``CPicklerTests`` that wire ``_pickle.Pickler`` (and ``dumps``/``loads``, the
dispatch table and ``reducer_override`` hooks) into the abstract tests of
``test.pickletester``. This script imports those classes from the running
interpreter's ``test`` package (nothing of them lives in graphpickle's
repository) and derives from each a twin that wires graphpickle in the C
pickler's place: ``graphpickle.Pickler``, ``dump``/``dumps``/``load``/``loads``.
Where a twin pickles with ``graphpickle.Pickler`` and nothing went by value,
its payload must also be byte for byte what ``_pickle.Pickler`` writes.

Every pair runs; a test that passes with pickle and not with graphpickle must
be one of the INTENDED differences below, each named with its reason (no
patterns). Exit status 1 if another test fails only with graphpickle, or if an
intended difference no longer differs (the list must say what is true).

    python scripts/peer_suites/cpython_pickle.py [-v]   # any Python with graphpickle
"""

from __future__ import annotations

import _pickle
import collections
import contextlib
import io
import sys
import time
import unittest
from typing import Any

import graphpickle

try:
    from test import pickletester
    from test import test_pickle as cpython
except ImportError as exc:  # Debian splits them out: libpython3.X-testsuite
    sys.exit(f"CPython's pickle tests are not installed for this Python ({exc})")

_LOCAL_FUNCTION = (
    "the test's local function goes by value, where pickle refuses it "
    "(it cannot be found again by module and qualified name)"
)
_LOCAL_CLASS = (
    "the test's local class goes by value, where pickle refuses it "
    "(it cannot be found again by module and qualified name)"
)
_DESCRIPTORS = (
    "staticmethod and classmethod objects are pickled (cloudpickle's reducers: "
    "classmethod(f) of the function f), where pickle raises TypeError"
)
_HOOK_FIRST = (
    "graphpickle.Pickler comes first in the MRO, so its hook pickles the test's local "
    "functions and class by value before the mixin's reducer_override sees them (the "
    "mixin gets every object graphpickle leaves to pickle, as super() would give it)"
)

# "Twin.test_name": why graphpickle differs from pickle there. Exact names only;
# a name this Python's tests do not have is not checked.
INTENDED: dict[str, str] = {
    "GraphpicklePicklerTests.test_local_lookup_error": _LOCAL_FUNCTION,
    "GraphpickleDumpPickle_LoadPickle.test_local_lookup_error": _LOCAL_FUNCTION,
    "GraphpickleInMemoryPickleTests.test_local_lookup_error": _LOCAL_FUNCTION,
    "GraphpicklePicklingErrorTests.test_local_lookup_error": _LOCAL_FUNCTION,  # 3.13+
    "GraphpicklePicklingErrorTests.test_unpickleable_newobj_class": _LOCAL_CLASS,  # 3.13+
    "GraphpicklePicklingErrorTests.test_unpickleable_newobj_ex_class": _LOCAL_CLASS,  # 3.13+
    "GraphpicklePicklerTests.test_py_methods": _DESCRIPTORS,
    "GraphpicklePicklerTests.test_c_methods": _DESCRIPTORS,
    "GraphpickleDumpPickle_LoadPickle.test_py_methods": _DESCRIPTORS,
    "GraphpickleDumpPickle_LoadPickle.test_c_methods": _DESCRIPTORS,
    "GraphpickleInMemoryPickleTests.test_py_methods": _DESCRIPTORS,
    "GraphpickleInMemoryPickleTests.test_c_methods": _DESCRIPTORS,
    "GraphpicklePicklerHookTests.test_pickler_hook": _HOOK_FIRST,
    "GraphpicklePicklerHookTests.test_reducer_override_no_reference_cycle": _HOOK_FIRST,
}

# From 3.14 CPython notes each level its pickler went through ("when serializing
# list item 2", innermost first), and these tests compare the notes exactly.
# graphpickle's one note, the whole path from the root with the object and a
# reducer hint, takes their place (README, "Errors"). NOTES_ONLY checks that the
# notes are all that differs: each test runs again with pickle's notes put back
# on graphpickle's exception (same type and message only), and must pass.
_NOTES = (
    "graphpickle's note (the path from the root, the object, a reducer hint) takes the "
    "place of CPython's per-level 'when serializing ...' notes; nothing else differs"
)
NOTES_ONLY = (
    [
        "test_bad_newobj_ex_args",
        "test_bad_object_dict_items",
        "test_bad_object_list_items",
        "test_bad_reduce_result",
        "test_unpickleable_dict_items",
        "test_unpickleable_frozenset_items",
        "test_unpickleable_list_items",
        "test_unpickleable_newobj_args",
        "test_unpickleable_newobj_ex_args",
        "test_unpickleable_newobj_ex_kwargs",
        "test_unpickleable_object_dict_items",
        "test_unpickleable_object_list_items",
        "test_unpickleable_reconstructor",
        "test_unpickleable_reconstructor_args",
        "test_unpickleable_set_items",
        "test_unpickleable_state",
        "test_unpickleable_state_with_state_setter",
        "test_unpickleable_tuple_items",
    ]
    if sys.version_info >= (3, 14)
    else []
)
INTENDED.update({f"GraphpicklePicklingErrorTests.{name}": _NOTES for name in NOTES_ONLY})

# The C classes of test_pickle.py that have no graphpickle twin, and why.
NOT_TWINNED = {
    "CUnpicklerTests": "tests _pickle.Unpickler itself (graphpickle has no unpickler; "
    "graphpickle.loads gets AbstractUnpickleTests in GraphpickleInMemoryPickleTests)",
    "DumpPickle_CLoadPickle": "pickle's pure-Python pickler against the C unpickler",
    "SizeofTests": "the memory layout of _pickle.Pickler and _pickle.Unpickler",
    "HeapTypesTests": "the type objects of _pickle",
}


_compared = [0]  # payloads found byte for byte pickle's


def _check_same_bytes(test: Any, pickler: graphpickle.Pickler, arg: Any, kwargs: Any) -> None:
    """What graphpickle wrote by reference only must be what pickle writes."""
    data = pickler._graphpickle_output.getvalue()  # type: ignore[attr-defined]
    if pickler.pickled_by_value:
        return
    stock = io.BytesIO()
    try:
        _pickle.Pickler(stock, pickler.protocol, **kwargs).dump(arg)
    except Exception:
        # Pickling again may not repeat the first time (an object that mutates
        # itself when reduced); where pickle refuses what graphpickle pickled,
        # the test's own assertions say so.
        return
    test.assertEqual(data, stock.getvalue(), "graphpickle's bytes differ from pickle's")
    _compared[0] += 1


def _pickler_dumps(self: Any, arg: Any, proto: int | None = None, **kwargs: Any) -> bytes:
    out = io.BytesIO()
    pickler = self.pickler(out, proto, **kwargs)
    pickler._graphpickle_output = out
    pickler.dump(arg)
    _check_same_bytes(self, pickler, arg, kwargs)
    return out.getvalue()


def _function_dumps(self: Any, arg: Any, protocol: int | None = None, **kwargs: Any) -> bytes:
    """graphpickle.dumps; where a Pickler pickling ``arg`` again sends nothing by
    value, its bytes must be pickle's."""
    data = graphpickle.dumps(arg, protocol, **kwargs)
    pickler = graphpickle.Pickler(io.BytesIO(), protocol, **kwargs)
    pickler._graphpickle_output = io.BytesIO(data)  # type: ignore[attr-defined]
    try:
        pickler.dump(arg)
    except Exception:  # (pickling again may not repeat the first time)
        return data
    _check_same_bytes(self, pickler, arg, kwargs)
    return data


def _dumps_with_pickles_notes(
    self: Any, arg: Any, proto: int | None = None, **kwargs: Any
) -> bytes:
    """graphpickle's dumps, whose failure carries the notes pickle's would (for an
    exception of the same type and message): a test that then passes differs
    from pickle by its notes alone."""
    try:
        return _pickler_dumps(self, arg, proto, **kwargs)
    except Exception as exc:
        try:
            _pickle.Pickler(io.BytesIO(), proto, **kwargs).dump(arg)
        except Exception as stock:
            if type(stock) is type(exc) and str(stock) == str(exc):
                exc.__notes__ = list(getattr(stock, "__notes__", []))
        raise


class _HookPickler(graphpickle.Pickler, pickletester.AbstractCustomPicklerClass):
    """test_pickle.py's CustomCPicklerClass, with graphpickle's Pickler."""


def _twins() -> dict[str, dict[str, Any]]:
    """test_pickle.py's class name -> what its graphpickle twin sets."""
    return {
        "CPickleTests": {
            "dump": staticmethod(graphpickle.dump),
            "dumps": staticmethod(graphpickle.dumps),
            "load": staticmethod(graphpickle.load),
            "loads": staticmethod(graphpickle.loads),
            "Pickler": graphpickle.Pickler,
        },
        "CPicklingErrorTests": {"pickler": graphpickle.Pickler},  # 3.13+
        "CPicklerTests": {"pickler": graphpickle.Pickler, "dumps": _pickler_dumps},
        "CPersPicklerTests": {"pickler": graphpickle.Pickler},
        "CIdPersPicklerTests": {"pickler": graphpickle.Pickler},
        "CDumpPickle_LoadPickle": {"pickler": graphpickle.Pickler, "dumps": _pickler_dumps},
        "CPicklerUnpicklerObjectTests": {"pickler_class": graphpickle.Pickler},
        "CDispatchTableTests": {"pickler_class": graphpickle.Pickler},
        "CChainDispatchTableTests": {"pickler_class": graphpickle.Pickler},
        "CPicklerHookTests": {"pickler_class": _HookPickler},
        # pickle.dumps/loads: AbstractPickleTests and AbstractUnpickleTests
        # (bad input) through graphpickle.dumps and graphpickle.loads.
        "InMemoryPickleTests": {
            "dumps": _function_dumps,
            "loads": lambda self, buf, **kw: graphpickle.loads(buf, **kw),
        },
    }


def pairs() -> list[tuple[type, type]]:
    """(test_pickle.py's class, its graphpickle twin) for each class this Python has."""
    made = []
    for name, attributes in _twins().items():
        stock = getattr(cpython, name, None)
        if stock is None:
            continue
        twin_name = "Graphpickle" + (name[1:] if name.startswith("C") else name)
        twin = type(twin_name, (stock,), {**attributes, "__module__": __name__})
        made.append((stock, twin))
    return made


class _Outcomes(unittest.TestResult):
    """{test method: passed | failed | skipped | xfailed | xpassed}, and why it failed."""

    def __init__(self) -> None:
        super().__init__()
        self.outcome: dict[str, str] = {}
        self.why: dict[str, str] = {}

    def _set(self, test: Any, outcome: str, err: Any = None) -> None:
        name = test._testMethodName
        if self.outcome.get(name) != "failed":
            self.outcome[name] = outcome
        if err is not None and name not in self.why:
            self.why[name] = self._exc_info_to_string(err, test)

    def addSuccess(self, test: Any) -> None:
        self.outcome.setdefault(test._testMethodName, "passed")

    def addFailure(self, test: Any, err: Any) -> None:
        self._set(test, "failed", err)

    def addError(self, test: Any, err: Any) -> None:
        self._set(test, "failed", err)

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        if err is not None:
            self._set(test, "failed", err)

    def addSkip(self, test: Any, reason: str) -> None:
        self._set(test, "skipped")

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        self._set(test, "xfailed")

    def addUnexpectedSuccess(self, test: Any) -> None:
        self._set(test, "xpassed")


def run(cls: type, names: list[str] | None = None) -> _Outcomes:
    result = _Outcomes()
    loader = unittest.defaultTestLoader
    tests = loader.loadTestsFromTestCase(cls) if names is None else map(cls, names)
    with contextlib.redirect_stdout(io.StringIO()):  # what failing tests print (pickletools.dis)
        unittest.TestSuite(tests).run(result)
    return result


def _notes_aside() -> _Outcomes:
    """NOTES_ONLY's tests, with pickle's notes on graphpickle's exceptions."""
    if not NOTES_ONLY:
        return _Outcomes()
    twin = type(
        "GraphpicklePicklingErrorTestsWithPicklesNotes",
        (cpython.CPicklingErrorTests,),
        {"pickler": graphpickle.Pickler, "dumps": _dumps_with_pickles_notes},
    )
    return run(twin, NOTES_ONLY)


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    started = time.perf_counter()
    totals: collections.Counter[str] = collections.Counter()
    differences: list[tuple[str, str]] = []  # (test, why)
    intended_seen: dict[str, str] = {}
    stale: list[str] = []
    for stock_class, twin in pairs():
        stock, gp = run(stock_class), run(twin)
        for name in sorted(stock.outcome.keys() | gp.outcome.keys()):
            key = f"{twin.__name__}.{name}"
            before, after = stock.outcome.get(name, "missing"), gp.outcome.get(name, "missing")
            totals["run"] += 1
            totals["pass stock"] += before == "passed"
            totals["pass graphpickle"] += after == "passed"
            totals["skipped"] += before == after == "skipped"
            differs = before != "failed" and after in ("failed", "missing")
            if key in INTENDED:
                if differs:
                    intended_seen[key] = INTENDED[key]
                else:
                    stale.append(f"{key}: {before} with pickle, {after} with graphpickle")
            elif differs:
                differences.append((key, gp.why.get(name, after)))
    notes_aside = _notes_aside()
    elapsed = time.perf_counter() - started
    version = ".".join(map(str, sys.version_info[:3]))
    print(
        f"CPython's pickle tests on Python {version} (graphpickle {graphpickle.__version__}): "
        f"{totals['run']} run, {totals['pass stock']} pass with pickle, "
        f"{totals['pass graphpickle']} with graphpickle ({totals['skipped']} skipped "
        f"in both), in {elapsed:.1f} s"
    )
    print(f"  payloads compared with pickle's and equal, byte for byte: {_compared[0]}")
    print(f"  intended differences: {len(intended_seen)}")
    for key, reason in sorted(intended_seen.items()):
        print(f"    {key}: {reason}")
    print(f"  failing only with graphpickle, not intended: {len(differences)}")
    for key, why in differences:
        print(f"    {key}")
        if verbose:
            print("      " + why.rstrip().replace("\n", "\n      "))
    if stale:
        print(f"  listed as intended, but no longer different: {len(stale)}")
        for line in stale:
            print(f"    {line}")
    beyond_notes = sorted(n for n in NOTES_ONLY if notes_aside.outcome.get(n) != "passed")
    if NOTES_ONLY:
        print(
            f"  of the {len(NOTES_ONLY)} that differ by their notes, differing in more: "
            f"{len(beyond_notes)}"
        )
        for name in beyond_notes:
            print(f"    {name}")
            if verbose and name in notes_aside.why:
                print("      " + notes_aside.why[name].rstrip().replace("\n", "\n      "))
    return 1 if differences or stale or beyond_notes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
