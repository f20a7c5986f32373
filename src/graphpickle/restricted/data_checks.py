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
- numbers whose conversions cost what their *value* states, not their size:
  ``Fraction("1e30000000")`` and ``int(Decimal("1e100000000"))`` compute a
  power of ten of that exponent, ``Decimal(n)`` and ``str(n)`` of a big int
  take time quadratic in its digits, and so does numpy's or pandas' cast of
  an object array of them (``digits_problem``, ``number_problem``);
- ``str(x)`` of anything but text is ``repr(x)``, which visits a shared item
  each time it is reached (lists that share lists make it exponential), and
  an encoding named by the payload is looked up by name, which imports a
  module of the ``encodings`` package.

Each check returns what is wrong in words, or None. numpy and pandas are
imported only when an object of theirs is being checked.
"""

from __future__ import annotations

import copyreg
import decimal
import fractions
import re
from typing import Any

from . import budgets
from .budgets import ITEM_BYTES, LAZY_ITEM_BYTES, lazy_length

__all__ = [
    "Arguments",
    "allocation",
    "check_built",
    "check_call",
    "check_constructor",
    "check_state",
    "digits_problem",
    "number_problem",
    "reconstructor",
    "unfolded",
]


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
    elif _is_pandas(type(obj), "ExtensionArray"):
        return _array_problem(obj)
    elif _is_pandas(type(obj), "MultiIndex"):
        return _multi_index_problem(obj)
    elif given_state and _is_pandas(type(obj), "ExtensionDtype"):
        return _pandas_dtype_problem(obj)
    return None


def _pandas_dtype_problem(dtype: Any) -> str | None:
    """A pandas dtype given state whose parts are not what its constructor
    makes: a callable anywhere (a class or function from the payload), a
    subtype that is no dtype, categories that are no Index (pandas 2's
    SparseDtype given the numpy.dtype class as its subtype crashes on repr)."""
    import numpy as np

    for key, value in vars(dtype).items():
        if callable(value):
            return f"a pandas {type(dtype).__name__} whose {key} is a callable"
        is_dtype = isinstance(value, np.dtype) or _is_pandas(type(value), "ExtensionDtype")
        if key in ("_dtype", "_subtype") and value is not None and not is_dtype:
            return f"a pandas {type(dtype).__name__} whose {key} is no dtype"
        if key == "_categories" and value is not None and not _is_pandas(type(value), "Index"):
            return f"a pandas {type(dtype).__name__} whose categories are no Index"
    return None


def _multi_index_problem(index: Any) -> str | None:
    """A MultiIndex whose codes point outside its levels (pandas checks only
    some: an int8 code of -128 loads, and crashes the process when compared)."""
    try:
        for level, codes in zip(index.levels, index.codes, strict=True):
            if len(codes) != len(index.codes[0]):
                return "a pandas MultiIndex whose levels' codes differ in length"
            if len(codes) and (codes.min() < -1 or codes.max() >= len(level)):
                return "a pandas MultiIndex with codes past its levels"
    except (AttributeError, TypeError, ValueError) as exc:
        return f"a pandas MultiIndex whose codes cannot be read ({type(exc).__name__})"
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
        if index is not None and _sparse_index_problem(index, len(array.sp_values), np):
            return "a pandas SparseArray whose positions do not fit its length or values"
    except (AttributeError, TypeError, ValueError) as exc:
        return f"a pandas array whose layout cannot be read ({type(exc).__name__})"
    return None


def _sparse_index_problem(index: Any, values: int, np: Any) -> bool:
    """Whether a sparse index does not place ``values`` values inside its
    length, read from its own arrays (materialising a BlockIndex's positions
    would allocate as much as its blocks state)."""
    length = index.length
    if hasattr(index, "blocs"):
        starts = np.asarray(index.blocs, dtype=np.int64)
        lengths = np.asarray(index.blengths, dtype=np.int64)
        if starts.shape != lengths.shape or int(lengths.sum()) != values:
            return True
        return bool(len(starts)) and bool(
            (starts < 0).any() or (lengths < 0).any() or (starts + lengths > length).any()
        )
    positions = np.asarray(index.indices)
    return len(positions) != values or (
        bool(len(positions)) and bool(positions.min() < 0 or positions.max() >= length)
    )


def check_state(obj: Any, state: Any, found: Arguments | None = None) -> str | None:
    """Before BUILD on ``obj``: is ``state`` one its ``__setstate__`` may be
    trusted with? Any object's is checked as its type's call arguments are; numpy
    reads a dtype's state by position, and a state of another shape (a field
    missing, a datetime dtype given another kind's state) crashes the process
    (found by the wire's fuzz test)."""
    kind = type(obj)
    module = getattr(kind, "__module__", "")
    problem = check_call(f"{module}.{kind.__qualname__}", (state,), None, found)
    if problem is not None or module.startswith("pandas"):
        return problem
    if module.startswith("numpy"):
        import numpy as np

        if isinstance(obj, np.dtype) and not _dtype_state(state, obj.kind, np):
            return (
                "a numpy dtype given a state of another shape than numpy writes (numpy would crash)"
            )
        if isinstance(obj, np.ndarray):
            return _array_state_problem(state)
    return None


def _array_state_problem(state: Any) -> str | None:
    """An array's state is (version, shape, dtype, is_fortran, data). numpy
    checks bytes against the shape, but fills an array of objects (or of
    StringDType) from a list without checking its length, and reads past it."""
    if not isinstance(state, tuple) or len(state) not in (4, 5):
        return None  # numpy refuses it
    shape, data = state[-4], state[-1]
    if not isinstance(data, list):
        return None
    count = 1
    for dim in shape if isinstance(shape, tuple) else (shape,):
        if type(dim) is not int or dim < 0:
            return "a numpy array state whose shape is not made of counts"
        count *= dim
    if count != len(data):
        return (
            f"a numpy array state of shape {shape} given {len(data)} items "
            "(numpy would read past them)"
        )
    return None


def _dtype_state(state: Any, kind: str, np: Any) -> bool:
    """(version, endian, subarray, names, fields, itemsize, alignment, flags[,
    metadata]), as numpy writes it: version 3 without metadata, 4 with it (a
    datetime dtype's is (metadata, (unit, num, den, events))). Each part has
    its check (``_DTYPE_PARTS``); the metadata's depends on the dtype's kind
    (``_DTYPE_METADATA``)."""
    if not isinstance(state, tuple) or len(state) not in (8, 9) or state[0] != len(state) - 5:
        return False
    metadata = state[8] if len(state) == 9 else None
    check_metadata = _DTYPE_METADATA.get(kind, _plain_metadata)
    return all(check(state, np) for check in _DTYPE_PARTS) and check_metadata(metadata)


def _endian(state: Any, np: Any) -> bool:
    return isinstance(state[1], str) and state[1] in ("<", ">", "|", "=")


def _subarray(state: Any, np: Any) -> bool:
    """None, or (a dtype, a shape of ints)."""
    subarray = state[2]
    return subarray is None or (
        isinstance(subarray, tuple)
        and len(subarray) == 2
        and isinstance(subarray[0], np.dtype)
        and _ints(subarray[1])
    )


def _names_and_fields(state: Any, np: Any) -> bool:
    """Both None, or names (strs) and the fields they name: (dtype, offset[, title])."""
    names, fields = state[3], state[4]
    if names is None or fields is None:
        return names is fields
    return (
        isinstance(names, tuple)
        and all(type(name) is str for name in names)
        and isinstance(fields, dict)
        and set(fields) == set(names)
        and all(_field(field, np) for field in fields.values())
    )


def _field(field: Any, np: Any) -> bool:
    return (
        isinstance(field, tuple)
        and len(field) in (2, 3)
        and isinstance(field[0], np.dtype)
        and type(field[1]) is int
    )


def _sizes(state: Any, np: Any) -> bool:
    """itemsize, alignment and flags: ints."""
    return _ints(state[5:8])


def _ints(values: Any) -> bool:
    return isinstance(values, tuple) and all(type(n) is int for n in values)


def _plain_metadata(metadata: Any) -> bool:
    return metadata is None or isinstance(metadata, dict)


def _datetime_metadata(metadata: Any) -> bool:
    """(metadata or None, (unit: bytes, num, den, events: ints))."""
    return (
        isinstance(metadata, tuple)
        and len(metadata) == 2
        and _plain_metadata(metadata[0])
        and isinstance(metadata[1], tuple)
        and len(metadata[1]) == 4
        and isinstance(metadata[1][0], bytes)
        and _ints(metadata[1][1:])
    )


#: The checks of a dtype state's parts, in order.
_DTYPE_PARTS = (_endian, _subarray, _names_and_fields, _sizes)
#: The metadata's check by dtype kind (numpy's ``dtype.kind``): datetimes and
#: timedeltas carry their unit; any other kind, a dict or None.
_DTYPE_METADATA = {"M": _datetime_metadata, "m": _datetime_metadata}


class Arguments:
    """What the checks of one call need from its arguments, found in one walk
    through their tuples, lists and dicts (iteratively, each container once: a
    payload can nest and share them): the strings, the total length of the lazy
    sequences (``budgets.lazy_length``), how many items were visited, how many
    numbers are past the ``digits`` budget, and the ``hashing`` work of the
    tuples and objects met (``work``: what each costs to hash, by id, from
    ``budgets.TupleWork``; a tuple is counted each time it is met).

    The walk reads strings, ints and containers inline (most items are), and
    finds what it does with any other kind in ``_VISITS`` (atoms: nothing;
    other objects: ``_object``). A container of ``_BULK`` items or more that
    are all strings, ints and atoms is read in bulk (``_plain``): a payload may
    hand one shared list of a million ints to call after call (the ``walk``
    budget bounds how often)."""

    __slots__ = ("big_numbers", "hashing", "lazy", "shared", "strings", "visited", "work")

    def __init__(self, *values: Any, work: dict[int, tuple[int, Any]] | None = None) -> None:
        strings: list[str] = []
        self.strings, self.work = strings, work
        self.lazy = self.big_numbers = self.hashing = 0
        self.shared = False
        seen: set[int] = set()
        bound = _int_bound()
        todo = list(values)
        self.visited = visited = big_ints = hashing = 0
        visits = _VISITS
        while todo:
            value = todo.pop()
            visited += 1
            kind = type(value)
            if kind is str:
                strings.append(value)
            elif kind is int:
                if value > bound or value < -bound:
                    big_ints += 1
            elif kind is tuple or kind is list or kind is dict:  # its items, once
                if kind is tuple and work is not None:  # (counted each time it is met)
                    known = work.get(id(value))
                    hashing += len(value) if known is None else known[0]
                if id(value) in seen:
                    self.shared = True
                    continue
                seen.add(id(value))
                items = [*value, *value.values()] if kind is dict else value
                if len(items) < _BULK or not self._plain(items, bound):
                    todo.extend(items)
            else:
                visits.get(kind, Arguments._object)(self, value)
        self.visited += visited
        self.big_numbers += big_ints
        self.hashing += hashing

    def _plain(self, items: Any, bound: int) -> bool:
        """Whether ``items`` (a container's) are all strings, ints or atoms; if
        so, what visiting each would note (ints past ``bound``) is noted, in a
        few passes in C."""
        kinds = set(map(type, items))
        if not kinds <= _PLAIN:
            return False
        self.visited += len(items)
        if str in kinds:
            self.strings.extend(items if len(kinds) == 1 else [v for v in items if type(v) is str])
        if int in kinds:
            numbers = items if len(kinds) == 1 else [v for v in items if type(v) is int]
            if max(numbers) > bound or min(numbers) < -bound:
                self.big_numbers += sum(1 for v in numbers if v > bound or v < -bound)
        return True

    def _number(self, value: Any) -> None:
        """A Decimal or Fraction: past the ``digits`` budget?"""
        if _past_digits(value, _int_bound()):
            self.big_numbers += 1

    def _atom(self, value: Any) -> None:
        """A float, bool, None, bytes or complex: nothing to note."""

    def _object(self, value: Any) -> None:
        """Anything else: a lazy sequence's length, and what hashing it costs."""
        length = lazy_length(value)
        if length is not None:
            self.lazy += length
        if self.work is not None:
            known = self.work.get(id(value))
            if known is not None:
                self.hashing += known[0]


#: The kinds an ``Arguments`` walk notes nothing of but strings and big ints.
_PLAIN = frozenset((str, int, float, bool, type(None), bytes, complex))
#: Containers shorter than this are walked item by item: reading a few items in
#: bulk costs more than visiting them.
_BULK = 32
#: What the walk of ``Arguments`` does with each kind (not str, int or a container).
_VISITS: dict[type, Any] = {
    **dict.fromkeys((decimal.Decimal, fractions.Fraction), Arguments._number),
    **dict.fromkeys((float, bool, type(None), bytes, complex), Arguments._atom),
}


def unfolded(values: tuple[Any, ...], cap: int) -> int:
    """How many items a walk that follows every reference visits through the
    tuples, lists and dicts of ``values`` (a shared container counted each time
    it is reached; one that holds itself, once), or more than ``cap``. What
    walks its argument whole does that much: ``str`` of a list, ``UserString``,
    numpy's ``dtype`` of a nested field list (lists that share lists, 40 deep,
    are 2**40). Each container is summed once (its total is kept), iteratively."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    frames: list[list[Any]] = [[values, iter(values), 1]]
    active.add(id(values))
    while frames:
        frame = frames[-1]
        for item in frame[1]:
            kind = type(item)
            if kind is tuple or kind is list or kind is dict:
                known = sizes.get(id(item))
                if known is None and id(item) not in active:
                    active.add(id(item))
                    inner = (*item, *item.values()) if kind is dict else item
                    frames.append([item, iter(inner), 1])
                    break
                frame[2] += 1 if known is None else known
            else:
                frame[2] += 1
            if frame[2] > cap:
                return cap + 1
        else:
            frames.pop()
            active.discard(id(frame[0]))
            sizes[id(frame[0])] = frame[2]
            if frames:
                frames[-1][2] += frame[2]
                if frames[-1][2] > cap:
                    return cap + 1
    return sizes[id(values)]


_BOUND: tuple[int, int] = (0, 1)


def _int_bound() -> int:
    """``10 ** budgets.MAX_DIGITS``: an int past it has more digits than the
    budget (recomputed when the budget is changed)."""
    global _BOUND
    digits = budgets.MAX_DIGITS
    if _BOUND[0] != digits:
        _BOUND = (digits, 10**digits)
    return _BOUND[1]


def check_call(
    name: str, args: Any, kwargs: Any = None, found: Arguments | None = None
) -> str | None:
    """Before ``name(*args, **kwargs)`` (REDUCE, NEWOBJ) or a pandas object's
    BUILD state: arguments that make an allowed callable do more than build
    data. ``found`` is ``Arguments(args, kwargs)``, if the caller has it."""
    if name.startswith("pandas."):
        found = found or Arguments(args, kwargs)
        for text in found.strings:
            if "dateutil" in text:
                return (
                    "a dateutil zone named by a string (it may name a file, which dateutil opens)"
                )
        # (A class it is given is judged when it is one: inspect's stand-ins are not.)
        if (
            name.rpartition(".")[2] in _INDEX_RECONSTRUCTORS
            and isinstance(args, tuple)
            and args
            and isinstance(args[0], type)
            and not _is_pandas(args[0], "Index")
        ):
            return f"{name} given a class that is no pandas Index (it makes the class it is given)"
    return text_problem(name, args, kwargs)


def digits_problem(
    name: str, args: Any, kwargs: Any = None, found: Arguments | None = None
) -> str | None:
    """Before a call: a number it would convert past the ``digits`` budget.
    ``Fraction`` makes the power of ten of a string's exponent; ``int``,
    ``Decimal`` and ``Fraction`` convert a string of digits, and ``Decimal``
    and ``str`` a big int, in time quadratic in its digits; numpy's and pandas'
    casts do the same to what an array of objects holds. (A ``Decimal`` or
    ``Fraction`` past the budget is never made: ``number_problem``.)"""
    converts = name in _CONVERSIONS
    if not converts and not name.startswith(("pandas.", "numpy.")):
        return None
    found = found or Arguments(args, kwargs)
    limit = budgets.MAX_DIGITS
    if found.big_numbers:
        return (
            f"given a number past {limit:,} digits (an int, a Fraction, or a Decimal of that "
            "many digits or magnitude): converting it costs what its value states"
        )
    if name in _PARSES_NUMBERS:
        values = (*(args if isinstance(args, tuple) else ()), *(kwargs or {}).values())
        for value in values:
            if isinstance(value, str | bytes | bytearray) and _long_digits(value, limit):
                return f"a number parsed from text of more than {limit:,} digits in a row"
    if name == "fractions.Fraction":
        for text in found.strings:
            for exponent in _EXPONENT.findall(text):
                if abs(int(exponent)) > limit:
                    return f"a Fraction with an exponent beyond {limit:,} digits"
    return None


def number_problem(obj: Any) -> str | None:
    """After a call: a ``Fraction`` whose numerator or denominator is past the
    ``digits`` budget. Its arguments were within it (``digits_problem``), so
    it came from the arithmetic ``Fraction(a, b)`` makes of Fractions: refused
    there, each step of a chain (a Fraction squared again and again) costs at
    most a product of numbers within the budget. A ``Decimal`` is never
    refused for what it holds: making one costs its text, and only a
    conversion of it (``int``, ``Fraction``, a numpy or pandas cast) costs
    what its exponent states, refused by ``digits_problem``."""
    if type(obj) is _FRACTION:
        bound = _int_bound()
        if abs(obj.numerator) > bound or obj.denominator > bound:
            return f"a Fraction of more than {budgets.MAX_DIGITS:,} digits"
    return None


def _past_digits(number: Any, bound: int) -> bool:
    """Whether a ``Decimal`` or ``Fraction`` is past the ``digits`` budget
    (``bound`` is ``10 ** MAX_DIGITS``): a Decimal by its magnitude or its
    digits, a Fraction by its numerator or denominator."""
    if type(number) is _FRACTION:
        return abs(number.numerator) > bound or number.denominator > bound
    if not number.is_finite():
        return False
    limit = budgets.MAX_DIGITS
    # (its text is short for all but the rare long one: as_tuple is not cheap)
    return abs(number.adjusted()) > limit or (
        len(str(number)) > limit and len(number.as_tuple().digits) > limit
    )


def _long_digits(text: str | bytes | bytearray, limit: int) -> bool:
    """Whether ``text`` holds more than ``limit`` digits in a row (underscores
    between them allowed, as ``int`` allows them): parsing such a number takes
    time quadratic in its length. Each number of a ``Fraction``'s "n/d" is
    counted on its own."""
    pattern = _DIGIT_RUNS.get((limit, type(text) is str))
    if pattern is None:
        source = rf"\d(?:_?\d){{{limit}}}"
        pattern = re.compile(source if type(text) is str else source.encode())
        _DIGIT_RUNS[(limit, type(text) is str)] = pattern
    return pattern.search(text) is not None


_DIGIT_RUNS: dict[tuple[int, bool], Any] = {}
_DECIMAL = decimal.Decimal
_FRACTION = fractions.Fraction


# What converts numbers: each cost grows with a number's digits or exponent.
_CONVERSIONS = frozenset(
    {
        "builtins.int",
        "builtins.float",
        "builtins.complex",
        "builtins.str",
        "decimal.Decimal",
        "fractions.Fraction",
    }
)
_PARSES_NUMBERS = frozenset({"builtins.int", "decimal.Decimal", "fractions.Fraction"})


def text_problem(name: str, args: Any, kwargs: Any = None) -> str | None:
    """``str``, ``bytes`` and ``bytearray`` as data uses them: ``str`` of text
    (of anything else it is a repr, exponential in how the payload shares a
    container's items), and encodings that are builtin (any other is looked
    up by name, which imports a module of the ``encodings`` package)."""
    if name not in _TEXT:
        return None
    positional = args if isinstance(args, tuple) else ()
    if name == "builtins.str" and positional and type(positional[0]) not in _RAW_TEXT:
        return (
            f"str of a {type(positional[0]).__qualname__} (a repr, whose cost grows with how "
            "the payload shares its items)"
        )
    encoding = positional[1] if len(positional) > 1 else (kwargs or {}).get("encoding")
    if encoding is not None and encoding not in _ENCODINGS:
        return f"an encoding named {str(encoding)[:40]!r} (looking it up imports a codec module)"
    return None


_TEXT = frozenset({"builtins.str", "builtins.bytes", "builtins.bytearray"})
_RAW_TEXT = frozenset({str, bytes, bytearray})
# What pickles write (bytearray at protocols < 3: latin-1) and the common ones.
_ENCODINGS = frozenset({"latin-1", "latin1", "iso-8859-1", "utf-8", "utf8", "ascii"})


def check_constructor(func: Any, args: Any, kwargs: Any = None) -> str | None:
    """Before a call of an allowed class: pandas pickles its frames, series,
    indexes and extension arrays as an empty call and then their state, so a
    call with arguments is none it writes, and can build from sizes the payload
    only states (``DataFrame(index=..., columns=...)`` allocates rows times
    columns from two short lists)."""
    if (args or kwargs) and isinstance(func, type) and _is_pandas(func, *_PANDAS_CONTAINERS):
        return (
            f"a call of pandas' {func.__qualname__} with arguments (pandas pickles it as an "
            "empty call and its state)"
        )
    return None


def allocation(name: str, args: Any, found: Arguments) -> int:
    """About what ``name(*args)`` (or a BUILD, ``name`` empty) may allocate
    beyond the data it is given: a copy of its arguments' items, the lazy
    sequences it may make real (``budgets.LAZY_ITEM_BYTES`` each), a count given
    to ``bytes``/``bytearray``, a numpy shape."""
    total = found.visited * ITEM_BYTES + found.lazy * LAZY_ITEM_BYTES
    if not isinstance(args, tuple) or not args:
        return total
    if name in ("builtins.bytes", "builtins.bytearray") and type(args[0]) is int:
        total += max(args[0], 0)
    elif name == "numpy.ndarray":
        total += _array_bytes(args[0], args[1] if len(args) > 1 else "f8")
    elif name.endswith("multiarray._reconstruct") and len(args) == 3:
        total += _array_bytes(args[1], args[2])
    return total


def _array_bytes(shape: Any, dtype: Any) -> int:
    dims = shape if isinstance(shape, tuple) else (shape,)
    count = 1
    for dim in dims:
        if type(dim) is not int:
            return 0  # numpy refuses it before allocating
        count *= max(dim, 0)
    try:
        import numpy as np

        itemsize = max(int(np.dtype(dtype).itemsize), 1)
    except (TypeError, ValueError):
        itemsize = 8
    return count * itemsize


def _is_pandas(kind: Any, *bases: str) -> bool:
    """Whether ``kind`` is a pandas class with one of ``bases`` (by name) in its
    MRO (without importing pandas; pandas 3 names its classes' module "pandas")."""
    return (
        isinstance(kind, type)
        and getattr(kind, "__module__", "").startswith("pandas")
        and any(klass.__name__ in bases for klass in kind.__mro__)
    )


_PANDAS_CONTAINERS = ("NDFrame", "Index", "ExtensionArray")
_INDEX_RECONSTRUCTORS = frozenset(
    {"_new_Index", "_new_DatetimeIndex", "_new_IntervalIndex", "_new_TimedeltaIndex"}
)


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
    """Each column placed exactly once, by blocks whose placements are as long
    as their values (counted before any placement is made into an array: a
    placement can be a slice that states any length)."""
    if getattr(manager, "ndim", None) != 2 or not hasattr(manager, "blocks"):
        return None
    import numpy as np

    try:
        columns = len(manager.axes[0])
        placed = 0
        for block in manager.blocks:
            values = block.values
            width = values.shape[0] if getattr(values, "ndim", 1) == 2 else 1
            if len(block.mgr_locs) != width:
                return "a pandas BlockManager with a block placed at more columns than it holds"
            placed += width
        if placed != columns:
            return "a pandas BlockManager whose blocks do not place each column exactly once"
        if not columns:
            return None
        locs = np.sort(np.concatenate([block.mgr_locs.as_array for block in manager.blocks]))
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        return f"a pandas BlockManager whose blocks cannot be read ({type(exc).__name__})"
    if not np.array_equal(locs, np.arange(columns)):
        return "a pandas BlockManager whose blocks do not place each column exactly once"
    return None


def _name(obj: Any) -> str:
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    return type(obj).__qualname__
