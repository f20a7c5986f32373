"""Every way a payload can make restricted loading call something, and what each gets.

- a global: only what the allow-list names (test_restricted.py);
- REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST: the call's arguments pass ``check_call``
  (test_restricted.py, test_data_only.py);
- BUILD: the type's ``__setstate__``, never one an instance's dict holds, with a
  state that passes the checks of the type's arguments; a state sets no dunder;
- APPEND(S), ADDITEMS: the type's ``append``, ``extend``, ``add``, never the
  instance's; SETITEM(S): ``obj[key] = value`` (the type's ``__setitem__``);
- PERSID, BINPERSID: no ``persistent_load``, so an UnpicklingError;
- EXT1, EXT2, EXT4: refused (the copyreg registry is no allow-list).
"""

from __future__ import annotations

import collections
import pickle
import pickletools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from security_corpus import Build, Call, G, Raw, ops, program

import graphpickle
from graphpickle import DATA_ONLY, BudgetExceededError, ForbiddenGlobalError

USER_LIST = G("collections", "UserList")
FRACTION = G("fractions", "Fraction")
# An exponent past what the digits budget lets Fraction parse (budgets.MAX_DIGITS).
HUGE = "1e5000"


def restricted(data: bytes) -> object:
    return graphpickle.loads(data, allowed=DATA_ONLY)


def test_a_setstate_planted_in_an_instance_dict_is_never_called():
    # A first BUILD puts __setstate__ into a UserList's dict; plain pickle's second
    # BUILD calls it with the payload's state, past the checks a call gets.
    planted = Build(Call(USER_LIST), {"__setstate__": FRACTION})
    with pytest.raises(ForbiddenGlobalError, match="sets '__setstate__' in its dict"):
        restricted(program(Build(planted, HUGE)))
    with pytest.raises(BudgetExceededError, match="exponent beyond"):
        restricted(program(Call(FRACTION, HUGE)))  # the call it would have been
    loaded = pickle.loads(program(Build(planted, HUGE)))  # plain pickle calls it
    assert type(loaded) is collections.UserList


@pytest.mark.parametrize("dunder", ["__class__", "__setstate__", "__reduce_ex__", "__dict__"])
def test_a_state_never_sets_a_dunder(dunder):
    for state in ({dunder: USER_LIST}, (None, {dunder: USER_LIST})):
        with pytest.raises(ForbiddenGlobalError, match=f"sets '{dunder}'"):
            restricted(program(Build(Call(USER_LIST), state)))


def test_plain_attributes_are_still_set_from_state():
    loaded = restricted(program(Build(Call(USER_LIST), {"data": [1, 2], "_private__x": 3})))
    assert isinstance(loaded, collections.UserList) and loaded.data == [1, 2]
    assert loaded.__dict__["_private__x"] == 3


def test_appends_calls_the_types_extend_not_one_the_instance_holds():
    # plain pickle would call the planted Counter with the items, and the list
    # would stay empty
    target = Build(Call(USER_LIST), {"data": [], "extend": G("collections", "Counter")})
    data = program(Raw(ops(target) + pickle.MARK + ops(1) + ops(2) + pickle.APPENDS))
    assert pickle.loads(data).data == []
    loaded = restricted(data)
    assert loaded.data == [1, 2]


def test_append_calls_the_types_append():
    target = Build(Call(USER_LIST), {"data": [], "append": FRACTION})
    data = program(Raw(ops(target) + ops(HUGE) + pickle.APPEND))
    assert restricted(data).data == [HUGE]


def test_an_object_with_no_append_fails_with_pickles_error_as_the_cause():
    data = program(Raw(ops(Call(G("collections", "OrderedDict"))) + ops(1) + pickle.APPEND))
    with pytest.raises(AttributeError, match="append"):
        pickle.loads(data)
    with pytest.raises(graphpickle.UnpicklingError, match=r"stopped at APPEND.*append") as caught:
        restricted(data)
    assert isinstance(caught.value.__cause__, AttributeError)


def test_persistent_ids_have_no_loader():
    for opcode in (pickle.PERSID + b"x\n", ops("x") + pickle.BINPERSID):
        with pytest.raises(pickle.UnpicklingError, match="persistent"):
            restricted(program(Raw(opcode)))


def test_extension_codes_are_refused():
    with pytest.raises(ForbiddenGlobalError, match="extension code"):
        restricted(program(Raw(pickle.EXT1 + b"\x01")))


def test_a_refusal_names_the_opcode_and_its_byte_offset():
    planted = Build(Call(USER_LIST), {"__setstate__": FRACTION})
    data = program(Build(planted, HUGE))
    with pytest.raises(ForbiddenGlobalError) as caught:
        restricted(data)
    builds = [
        position for op, _, position in __import__("pickletools").genops(data) if op.name == "BUILD"
    ]
    assert (caught.value.opcode, caught.value.offset) == ("BUILD", builds[0])
    assert f"refused at BUILD, byte {builds[0]}" in caught.value.__notes__[0]
    shell = program(Call(G("os", "system"), "x"))
    with pytest.raises(ForbiddenGlobalError) as caught:
        restricted(shell)
    [at] = [position for op, _, position in pickletools.genops(shell) if op.name == "STACK_GLOBAL"]
    assert (caught.value.opcode, caught.value.offset) == ("STACK_GLOBAL", at)


@pytest.fixture
def module_with_a_singleton(monkeypatch):
    """A module whose function returns an object that only the module holds."""
    import types

    module = types.ModuleType("graphpickle_test_singleton")
    module.SINGLE = []
    module.get = lambda: module.SINGLE
    module.get.__module__ = module.__name__
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_a_call_result_held_once_elsewhere_is_not_changed(module_with_a_singleton):
    """An object a call returns that one other reference holds existed before
    the load (CPython 3.14 borrows references where 3.11 counted them)."""
    import graphpickle
    from graphpickle import ForbiddenGlobalError

    name = module_with_a_singleton.__name__
    head = b"\x80\x04\x8c" + bytes([len(name)]) + name.encode() + b"\x8c\x03get\x93)R"
    for change in (b"(K\x01e.", b"K\x01a.", b"}\x8c\x01aK\x01sb."):
        with pytest.raises(ForbiddenGlobalError, match="existed before this load"):
            graphpickle.loads(head + change, allowed={f"{name}.get"})
    assert module_with_a_singleton.SINGLE == []
    fresh = b"\x80\x04\x8c\x08builtins\x8c\x04list\x93)R(K\x01e."
    assert graphpickle.loads(fresh, allowed={"builtins.list"}) == [1]


def test_reference_counts_are_read_on_this_python():
    """The rule above reads reference counts, checked at import: on every
    declared Python the check passes (else every call result would be refused
    a change, silently stricter)."""
    from graphpickle.restricted import unpickler

    assert unpickler._FRESH is not None
    assert unpickler._references([object()]) == unpickler._FRESH


def test_without_reference_counts_every_call_result_is_left_unchanged():
    import subprocess

    code = (
        "import graphpickle\n"
        "data = b'\\x80\\x04\\x8c\\x08builtins\\x8c\\x04list\\x93)R(K\\x01e.'\n"
        "try:\n"
        "    graphpickle.loads(data, allowed={'builtins.list'})\n"
        "except graphpickle.ForbiddenGlobalError as exc:\n"
        "    print(exc)\n"
    )
    env = {**__import__("os").environ, "GRAPHPICKLE_NO_REFCOUNT": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert "cannot tell from one that existed before" in done.stdout, done.stdout + done.stderr
