"""Checks restricted loading makes on allowed data types that trust their input.

Some classes and reconstructors in ``DATA_ONLY`` believe whatever state they
are given, and a forged state corrupts memory or reaches the file system (all
found by review and reproduced; docs/security.md lists them):

- a numpy dtype's BUILD state sets its flags and field offsets: flags that
  deny holding objects turn raw bytes into object pointers, and a field offset
  past the item reads outside the array;
- a pandas BlockManager's block placements are indexes into its columns,
  written without a bounds check on pandas 3; so are a Categorical's codes, a
  masked array's mask and a SparseArray's positions, which pandas' C loops read
  unchecked;
- ``copyreg._reconstructor(cls, object, None)`` makes an object without
  running its class's constructor (an uninitialised ``MultiIndex`` crashes when
  read);
- pandas turns a time-zone string into a zone, and ``"dateutil/<path>"`` makes
  dateutil open that path, also inside a dtype string;
- ``Fraction("1e30000000")`` computes ``10**30000000``, and so does
  ``Fraction(Decimal("1e30000000"))``.

Each check returns what is wrong in words, or None. numpy and pandas are
imported only when an object of theirs is being checked.
"""

from __future__ import annotations

import copyreg
import decimal
import re
import sys
from typing import Any

__all__ = ["check_built", "check_call", "reconstructor"]


def check_built(obj: Any, *, given_state: bool = False) -> str | None:
    """After a call that returned ``obj``, or BUILD on it (``given_state``): is
    its state sound?"""
    module = getattr(type(obj), "__module__", "")
    if module.startswith("numpy"):
        import numpy as np

        if isinstance(obj, np.dtype):
            return _dtype_problem(obj, np)
    elif module.startswith("pandas.core.internals"):
        if given_state and hasattr(obj, "mgr_locs") and not hasattr(obj, "blocks"):
            # A block's placement, changed after its manager was checked.
            return "a pandas block given new state (pandas rebuilds blocks by a call)"
        return _manager_problem(obj)
    elif module.startswith("pandas") and any(  # (pandas 3 names its classes' module "pandas")
        klass.__name__ == "ExtensionArray" for klass in type(obj).__mro__
    ):
        return _array_problem(obj)
    return None


def _array_problem(array: Any) -> str | None:
    """A pandas extension array whose integer codes or positions index outside
    what they index (pandas' take and its C loops trust them): a Categorical's
    codes past its categories, a masked array whose mask is not its values'
    shape, a SparseArray whose positions are past its length or not as many as
    its values."""
    import numpy as np

    try:
        codes = getattr(array, "_codes", None)
        if codes is not None:
            categories = len(array.categories)
            if not (isinstance(codes, np.ndarray) and codes.dtype.kind == "i" and codes.ndim == 1):
                return "a pandas Categorical whose codes are not a 1-d integer array"
            if codes.size and (codes.min() < -1 or codes.max() >= categories):
                return "a pandas Categorical with codes past its categories"
        mask = getattr(array, "_mask", None)
        if mask is not None:
            data = array._data
            if not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_) or (
                getattr(data, "shape", None) != mask.shape
            ):
                return "a pandas masked array whose mask does not match its values"
        index = getattr(array, "sp_index", None)
        if index is not None:
            positions = index.to_int_index().indices
            length = index.length
            if len(array.sp_values) != len(positions) or (
                len(positions) and (positions.min() < 0 or positions.max() >= length)
            ):
                return "a pandas SparseArray whose positions do not fit its length or values"
    except (AttributeError, TypeError, ValueError) as exc:
        return f"a pandas array whose layout cannot be read ({type(exc).__name__})"
    return None


def check_state(obj: Any, state: Any) -> str | None:
    """Before BUILD on ``obj``: is ``state`` one its ``__setstate__`` may be
    trusted with? Any object's is checked as its type's call arguments are; numpy
    reads a dtype's state by position, and a state of another shape (a field
    missing, a datetime dtype given another kind's state) crashes the process
    (found by the wire's fuzz test)."""
    kind = type(obj)
    module = getattr(kind, "__module__", "")
    problem = check_call(f"{module}.{kind.__qualname__}", (state,))
    if problem is not None or module.startswith("pandas"):
        return problem
    if module.startswith("numpy"):
        import numpy as np

        if isinstance(obj, np.dtype) and not _dtype_state(state, obj.kind in "mM", np):
            return (
                "a numpy dtype given a state of another shape than numpy writes (numpy would crash)"
            )
    return None


def _dtype_state(state: Any, datetime: bool, np: Any) -> bool:
    """(version, endian, subarray, names, fields, itemsize, alignment, flags[,
    metadata]), as numpy writes it: version 3 without metadata, 4 with it (a
    datetime dtype's is (metadata, (unit, num, den, events)))."""
    if not isinstance(state, tuple) or len(state) not in (8, 9) or state[0] != len(state) - 5:
        return False
    _, endian, subarray, names, fields, *numbers = state[:8]
    if not (isinstance(endian, str) and endian in ("<", ">", "|", "=")):
        return False
    if not all(type(number) is int for number in numbers):
        return False
    if subarray is not None and not (
        isinstance(subarray, tuple)
        and len(subarray) == 2
        and isinstance(subarray[0], np.dtype)
        and isinstance(subarray[1], tuple)
        and all(type(n) is int for n in subarray[1])
    ):
        return False
    if (names is None) != (fields is None):
        return False
    if names is not None and not (
        isinstance(names, tuple)
        and all(type(name) is str for name in names)
        and isinstance(fields, dict)
        and set(fields) == set(names)
        and all(
            isinstance(field, tuple)
            and len(field) in (2, 3)
            and isinstance(field[0], np.dtype)
            and type(field[1]) is int
            for field in fields.values()
        )
    ):
        return False
    metadata = state[8] if len(state) == 9 else None
    if not datetime:
        return metadata is None or isinstance(metadata, dict)
    return (
        isinstance(metadata, tuple)
        and len(metadata) == 2
        and (metadata[0] is None or isinstance(metadata[0], dict))
        and isinstance(metadata[1], tuple)
        and len(metadata[1]) == 4
        and isinstance(metadata[1][0], bytes)
        and all(type(number) is int for number in metadata[1][1:])
    )


def check_call(name: str, args: Any, kwargs: Any = None) -> str | None:
    """Before ``name(*args, **kwargs)`` (REDUCE, NEWOBJ) or a pandas object's
    BUILD state: arguments that make an allowed callable do more than build."""
    if name.startswith("pandas."):
        for text in _strings(args, kwargs):
            if "dateutil" in text:
                return (
                    "a dateutil zone named by a string (it may name a file, which dateutil opens)"
                )
    elif name == "fractions.Fraction":
        limit = sys.get_int_max_str_digits() or 4300
        for text in _strings(args, kwargs):
            for exponent in _EXPONENT.findall(text):
                if abs(int(exponent)) > limit:
                    return f"a Fraction with an exponent beyond {limit} digits"
        # A Decimal's exponent is computed as a power of ten as well (minutes
        # for Fraction(Decimal("1e999999999"))).
        for value in (*(args if isinstance(args, tuple) else ()), *(kwargs or {}).values()):
            if isinstance(value, decimal.Decimal):
                exponent = value.as_tuple().exponent
                if isinstance(exponent, int) and abs(exponent) > limit:
                    return f"a Fraction of a Decimal with an exponent beyond {limit} digits"
    return None


def reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """``copyreg._reconstructor`` as restricted loading provides it: only for a
    class that pickles itself that way (protocols 0 and 1 with object's own
    ``__reduce_ex__``), so no object is made past the constructor its class has."""
    if (
        not isinstance(cls, type)
        or not isinstance(base, type)
        or base not in cls.__mro__
        or getattr(cls, "__reduce_ex__", None) is not _OBJECT_REDUCE_EX
        or getattr(cls, "__reduce__", None) is not _OBJECT_REDUCE
    ):
        from ..errors import ForbiddenGlobalError

        raise ForbiddenGlobalError(
            f"restricted loading refused copyreg._reconstructor({_name(cls)}, {_name(base)}, ...): "
            "it would make an object its class's own pickling never makes this way",
            name="copyreg._reconstructor",
        )
    rebuild: Any = getattr(copyreg, "_reconstructor")  # noqa: B009 (private, untyped)
    return rebuild(cls, base, state)


_OBJECT_REDUCE_EX = object.__reduce_ex__
_OBJECT_REDUCE = object.__reduce__
_EXPONENT = re.compile(r"[eE]\s*([+-]?\d+)")


def _strings(*values: Any) -> list[str]:
    """Every str inside ``values``, through tuples, lists and dicts (iteratively,
    each container once: a payload can nest and share them)."""
    found: list[str] = []
    seen: set[int] = set()
    todo = list(values)
    while todo:
        value = todo.pop()
        if type(value) is str:
            found.append(value)
        elif type(value) in (tuple, list, dict) and id(value) not in seen:
            seen.add(id(value))
            todo.extend(value.values() if type(value) is dict else value)
            if type(value) is dict:
                todo.extend(value)
    return found


def _dtype_problem(dtype: Any, np: Any) -> str | None:
    if type(dtype).__name__ == "StringDType":
        return None  # not a legacy dtype: its state is not flags and offsets
    try:
        if dtype.names is not None:
            fields = [dtype.fields[name] for name in dtype.names]
            rebuilt = np.dtype(
                {
                    "names": list(dtype.names),
                    "formats": [field[0] for field in fields],
                    "offsets": [field[1] for field in fields],
                    "itemsize": dtype.itemsize,
                    "aligned": dtype.isalignedstruct,
                }
            )
        elif dtype.subdtype is not None:
            rebuilt = np.dtype(dtype.subdtype)
        else:
            rebuilt = np.dtype(dtype.str)
    except (TypeError, ValueError) as exc:
        return f"a numpy dtype whose layout numpy refuses ({exc})"
    same = (
        rebuilt == dtype
        and rebuilt.flags == dtype.flags
        and rebuilt.itemsize == dtype.itemsize
        and rebuilt.alignment == dtype.alignment
        and rebuilt.hasobject == dtype.hasobject
    )
    if not same:
        return "a numpy dtype whose flags or layout differ from what numpy derives from it"
    return None


def _manager_problem(manager: Any) -> str | None:
    if getattr(manager, "ndim", None) != 2 or not hasattr(manager, "blocks"):
        return None
    try:
        columns = len(manager.axes[0])
        placed = sorted(int(i) for block in manager.blocks for i in block.mgr_locs.as_array)
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        return f"a pandas BlockManager whose blocks cannot be read ({type(exc).__name__})"
    if placed != list(range(columns)):
        return "a pandas BlockManager whose blocks do not place each column exactly once"
    return None


def _name(obj: Any) -> str:
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    return type(obj).__qualname__
