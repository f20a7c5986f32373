"""Restricted loading runs only the opcodes it has reviewed: its table is built
from a list of names, not copied from pickle's, so an opcode a later Python adds
is refused by name (and the first test here fails on that Python, to have it
reviewed)."""

from __future__ import annotations

import pickle
import pickletools

import pytest

import graphpickle
from graphpickle import DATA_ONLY, ForbiddenGlobalError
from graphpickle.restricted import unpickler


def _names(table):
    return {unpickler._opcode_name(code) or hex(code) for code in table}


def test_every_opcode_of_this_pythons_pickle_has_been_reviewed():
    assert _names(pickle._Unpickler.dispatch) == unpickler.REVIEWED_OPCODES
    assert {op.name for op in pickletools.opcodes} == unpickler.REVIEWED_OPCODES


def test_an_opcode_not_reviewed_is_refused_by_name(monkeypatch):
    new = 0xA0  # no opcode today
    assert unpickler._opcode_name(new) is None
    table = unpickler.reviewed_table({**pickle._Unpickler.dispatch, new: lambda self: None})
    assert set(table) == set(pickle._Unpickler.dispatch) | {new}
    monkeypatch.setitem(unpickler._RestrictedUnpickler.dispatch, new, table[new])
    with pytest.raises(ForbiddenGlobalError, match="refused opcode 0xa0") as raised:
        graphpickle.loads(b"\x80\x05K\x01\xa0.", allowed=DATA_ONLY)
    assert raised.value.name == "opcode 0xa0"
    assert raised.value.offset == 4  # (after PROTO and BININT1)


def test_a_reviewed_opcode_keeps_pickles_own_implementation():
    table = unpickler.reviewed_table(pickle._Unpickler.dispatch)
    assert table[pickle.EMPTY_LIST[0]] is pickle._Unpickler.dispatch[pickle.EMPTY_LIST[0]]


INST_AND_OBJ = {
    # MARK, the arguments, INST module name / MARK, the class, the arguments, OBJ
    "INST": lambda module, name, args: b"(" + args + b"i" + module + b"\n" + name + b"\n.",
    "OBJ": lambda module, name, args: b"\x80\x01(c" + module + b"\n" + name + b"\n" + args + b"o.",
}


@pytest.mark.parametrize("opcode", INST_AND_OBJ)
def test_inst_and_obj_make_what_pickle_makes(opcode):
    """Implemented by restricted loading itself: a class with no arguments is
    made and not initialized, as pickle does; with arguments it is called."""
    data = INST_AND_OBJ[opcode](b"collections", b"OrderedDict", b"")
    assert {op.name for op, _, _ in pickletools.genops(data)} >= {opcode}
    assert graphpickle.loads(data, allowed=DATA_ONLY) == pickle.loads(data)
    data = INST_AND_OBJ[opcode](b"builtins", b"bytearray", b"I3\n")
    assert graphpickle.loads(data, allowed=DATA_ONLY) == pickle.loads(data) == bytearray(3)


@pytest.mark.parametrize("opcode", INST_AND_OBJ)
def test_what_inst_and_obj_make_is_the_payloads_to_fill(opcode):
    """What they return is new, as any call's result: SETITEM and BUILD may fill
    it (hypothesis found it refused as existing before, where a local held it)."""
    data = INST_AND_OBJ[opcode](b"collections", b"OrderedDict", b"")[:-1] + b"K\x01K\x02s."
    assert graphpickle.loads(data, allowed=DATA_ONLY) == pickle.loads(data) == {1: 2}


@pytest.mark.parametrize("opcode", INST_AND_OBJ)
def test_inst_and_obj_are_checked_as_every_call(opcode):
    with pytest.raises(ForbiddenGlobalError, match=r"os\.getcwd"):
        graphpickle.loads(INST_AND_OBJ[opcode](b"os", b"getcwd", b""), allowed=DATA_ONLY)
    huge = INST_AND_OBJ[opcode](b"builtins", b"bytearray", b"I1073741824\n")
    with pytest.raises(graphpickle.BudgetExceededError) as raised:
        graphpickle.loads(huge, allowed=DATA_ONLY)
    assert (raised.value.budget, raised.value.opcode) == ("memory", opcode)


@pytest.mark.parametrize("opcode", ["EXT1", "EXT2", "EXT4"])
def test_ext_is_refused_whatever_copyreg_has_cached(opcode):
    import copyreg

    code = 0x7FFF_0001 if opcode == "EXT4" else 250
    argument = code.to_bytes({"EXT1": 1, "EXT2": 2, "EXT4": 4}[opcode], "little")
    data = b"\x80\x02" + getattr(pickle, opcode) + argument + b"."
    copyreg.add_extension("os", "getcwd", code)
    try:
        pickle.loads(data)  # (now in copyreg's cache, which pickle's EXT reads first)
        with pytest.raises(ForbiddenGlobalError, match=f"extension code {code}"):
            graphpickle.loads(data, allowed=DATA_ONLY)
    finally:
        copyreg.remove_extension("os", "getcwd", code)
