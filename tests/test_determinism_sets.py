"""Where a pickle writes sets, in C (``determinism/_sets.c``), as the Python
reference (pickletools' description of each opcode) says."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphpickle.determinism import sets


def _sets_to_sort_reference(data: bytes) -> bool:
    """sets_to_sort in Python, from pickletools' description of each opcode."""
    import pickletools

    above = [0]  # items above each mark
    found = False
    for op, _, _ in pickletools.genops(data):
        if op.name == "MARK":
            above.append(0)
        elif pickletools.markobject in op.stack_before:
            found |= op.name in ("ADDITEMS", "FROZENSET") and above[-1] >= 2
            above.pop()
            above[-1] += len(op.stack_after)
        elif op.name == "POP" and above[-1] == 0:
            above.pop()
        else:
            above[-1] += len(op.stack_after) - len(op.stack_before)
    return found


_hashable = st.recursive(
    st.integers() | st.text(max_size=3) | st.none(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=4),
    max_leaves=12,
)
_data = st.recursive(
    _hashable | st.sets(_hashable, max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_data, st.integers(0, 5))
def test_sets_to_sort_counts_set_members_as_pickletools_does(obj, protocol):
    if sets._sets is None:
        pytest.skip("not built")
    data = pickle.dumps(obj, protocol)
    assert sets._sets.sets_to_sort(data) is _sets_to_sort_reference(data)


def test_sets_to_sort_refuses_what_is_not_a_whole_pickle():
    if sets._sets is None:
        pytest.skip("not built")
    whole = pickle.dumps([{1}, "x" * 300])
    for bad in (b"", whole[:-1], whole[:20], b"\xff.", b"(.", b"0.", b"X\xff\xff\xff\xff"):
        with pytest.raises(ValueError, match="whole, valid pickle"):
            sets._sets.sets_to_sort(bad)
    # It stops at the first set to sort: what follows is not read.
    assert sets._sets.sets_to_sort(pickle.dumps([{1, 2}, "x"])[:-3]) is True
    assert sets._sets.sets_to_sort(pickle.dumps([{1}, frozenset()])) is False


def test_note_set_keeps_exact_sets_only():
    if sets._sets is None:
        pytest.skip("not built")

    class SubSet(set):
        pass

    sink: list = []
    for obj in ({1}, frozenset(), SubSet(), [1], "s", None):
        assert sets._sets.note_set(sink, obj) is None
    assert sink == [{1}, frozenset()]
    with pytest.raises(TypeError):
        sets._sets.note_set((), {1})
