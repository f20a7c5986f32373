"""What restricted loading lets untrusted bytes cost, beyond their own size.

Each budget bounds one resource that a payload controls and plain pickle
spends without limit; exceeding it raises :class:`BudgetExceededError`, which
names the budget, the opcode and its byte offset:

- ``tuple_work``: the items that hashing or comparing one tuple visits,
  counting a shared item each time it is reached. A few hundred bytes of tuples
  that share their items make a dict key or set member whose hash takes
  2**depth steps (tuples do not cache their hash); the count is made when a
  tuple is built, from its items' counts, so it costs one lookup per item.
- ``input``: a length the payload declares must be behind it in the data
  before anything is allocated for it (BYTEARRAY8 allocates first, in pickle).
- ``depth``: how deeply what a payload builds nests (an item placed in a
  container, by any opcode or call, makes the container one deeper). Freeing
  160,000 nested deques recurses in C until the process crashes; the C pickler
  writes nothing deeper than its recursion limit (1,000 by default).
- ``memo``: a memo index past the data's length is one no pickler writes (each
  entry takes a byte at least); the C unpickler allocates its memo up to the
  index (``inspect``'s dry run refuses it too, in ``dry_load``). The number of
  memo entries and of frames is then bounded by the input's length.
- ``memory``: what calls and BUILD may allocate beyond the data the payload
  carries. Each is charged, before it runs, ``ITEM_BYTES`` for each item of
  its arguments (it may copy them: ``list(L)`` made a hundred thousand times
  from one shared ``L`` costs a few bytes of input each), ``LAZY_ITEM_BYTES``
  for each item of a lazy sequence it would make real (a ``range``, a pandas
  ``RangeIndex``: ``list(range(10**9))``, a ``DatetimeIndex`` of one), the
  sizes it is asked for (``bytearray(10**10)``, an array's shape), and, for
  arguments that share containers, each item a walk that follows every
  reference visits (``str`` or numpy's ``dtype`` of lists that share lists). The whole
  load may spend ``MEMORY_FLOOR`` plus ``MEMORY_PER_INPUT_BYTE`` for each byte
  of input. The checks that walk the arguments visit no more items than are
  charged, so their work is bounded too.
- ``hashing``: the items that hashing the dict keys, set members and call
  arguments of one load visits, in all: a key of a million items' work (within
  ``tuple_work``) placed in a dict two thousand times hashes it each time.
- ``walk``: the items that the checks' walks of call arguments and BUILD
  states visit in one load, in all (a walk visits each container once, but a
  shared one again for each call it is given to: ``list(L)`` made again and
  again from one shared ``L`` of 50,000 one-item tuples costs 6 bytes of input
  a call and 100,000 visits, about 0.1 s of Python). Without such sharing, a
  walk visits at most an item per byte of input; the floor leaves room for
  honest sharing and for containers calls make.
- ``digits``: a number written as text (the INT and LONG opcodes, a
  ``Fraction``'s string or ``Decimal``) may not have more than ``MAX_DIGITS``
  digits or exponent digits, whatever ``sys.set_int_max_str_digits`` says:
  converting text to an int takes time quadratic in its length. Holding a
  number past it is cheap (``Decimal("1E+999999")`` loads); converting one
  is not: no conversion (``int``, ``str``, ``Decimal``, ``Fraction``..., numpy
  and pandas names, a numpy or pandas BUILD state) is given an int, a
  ``Fraction`` or a ``Decimal`` (by digits or exponent) past it (``int`` of
  ``Decimal("1e100000000")`` computes that power of ten), and the arithmetic
  of ``Fraction(a, b)`` may not make a Fraction past it.

The limits are module constants, read at each load: assign one to lower or
raise it for the process.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import BudgetExceededError

#: Items one tuple's hash or comparison may visit (shared items counted each time).
TUPLE_WORK = 1_000_000
#: How deeply the objects a payload builds may nest (a call's result counts as
#: one deeper than its arguments' tuple, so a chain built by calls gets half).
MAX_DEPTH = 10_000
#: What the calls and BUILDs of one load may allocate beyond the data it
#: carries: the floor, plus this much per byte of input.
MEMORY_FLOOR = 64 << 20
MEMORY_PER_INPUT_BYTE = 64
#: What an item of a call's arguments is charged (a copy of it: a pointer, or a
#: dict entry's share).
ITEM_BYTES = 16
#: What an item of a lazy sequence is charged (once made real: a pointer and an
#: int object).
LAZY_ITEM_BYTES = 40
#: Digits of a number written as text (CPython's default int limit).
MAX_DIGITS = 4300
#: Items that all hashing of one load may visit (dict keys, set members and
#: call arguments, a tuple counted each time it is hashed): the floor, plus
#: this much per byte of input. About 5 ns an item: the floor is a fraction of
#: a second.
HASHING_FLOOR = 1 << 25
HASHING_PER_INPUT_BYTE = 32
#: Items that the argument and state walks of one load may visit, in all: the
#: floor, plus this much per byte of input. The floor is what ``memory``'s floor
#: already allowed (each item visited is charged ``ITEM_BYTES``), so a stream of
#: unknown length, which gets the floors only, loads what it loaded before.
WALK_FLOOR = 1 << 22
WALK_PER_INPUT_BYTE = 1

__all__ = [
    "HASHES",
    "HASHING_FLOOR",
    "HASHING_PER_INPUT_BYTE",
    "ITEM_BYTES",
    "LAZY_ITEM_BYTES",
    "MAX_DEPTH",
    "MAX_DIGITS",
    "MEMORY_FLOOR",
    "MEMORY_PER_INPUT_BYTE",
    "TUPLE_WORK",
    "WALK_FLOOR",
    "WALK_PER_INPUT_BYTE",
    "Allowance",
    "Depths",
    "Hashing",
    "TupleWork",
    "Walking",
    "check_memo",
    "exceeded",
    "lazy_length",
]


def exceeded(budget: str, opcode: str, offset: int | None, why: str) -> BudgetExceededError:
    where = "" if offset is None else f" at byte {offset}"
    return BudgetExceededError(
        f"restricted loading refused {opcode}{where}: {why} (budget {budget!r})",
        budget=budget,
        opcode=opcode,
        offset=offset,
    )


def check_memo(index: int, size: int | None, opcode: str, offset: int | None) -> None:
    """A memo index past the input's ``size`` is one no pickler writes (each
    entry takes a byte at least): the C unpickler would allocate up to it."""
    if size is not None and index > size:
        raise exceeded(
            "memo", opcode, offset, f"it stores memo entry {index:,} in a pickle of {size:,} bytes"
        )


class TupleWork:
    """The ``tuple_work`` count of the tuples one load builds, by id (the tuples
    are kept alive with their counts, so an id stays theirs), and of the
    objects calls made from many items (what hashing one may visit: a
    ``slice`` of shared tuples, an offset holding a long list of holidays)."""

    __slots__ = ("counts", "objects")

    def __init__(self) -> None:
        self.counts: dict[int, tuple[int, Any]] = {}
        self.objects = False  # whether any object but a tuple is counted

    def made(self, obj: Any, work: int) -> None:
        """A call made ``obj`` (not a tuple) from arguments whose walk visited
        ``work`` items (more than ``COUNTED_WORK``): hashing it may visit them
        all (none is cached)."""
        self.counts[id(obj)] = (work, obj)
        self.objects = True

    def count(self, value: tuple[Any, ...], opcode: str, offset: Any) -> None:
        """Count ``value``, a tuple just built; raise if it is over the budget.
        ``offset`` is called for the message only."""
        total = 1 + len(value)
        counts = self.counts
        limit = TUPLE_WORK
        objects = self.objects
        for item in value:
            if isinstance(item, tuple):
                known = counts.get(id(item))
                total += (self._count_unknown(item, limit) if known is None else known[0]) - 1
            elif objects and id(item) in counts:
                total += counts[id(item)][0] - 1
        if total > limit:  # (once, after the items: counts only grow)
            raise exceeded(
                "tuple_work",
                opcode,
                offset(),
                f"hashing or comparing this tuple would visit more than {limit:,} "
                "items (its items share tuples that share tuples)",
            )
        counts[id(value)] = (total, value)

    def _count_unknown(self, value: tuple[Any, ...], limit: int) -> int:
        """The count of a tuple this load did not build (what a call returned),
        through its tuples, stopping past ``limit``."""
        total = 0
        pending = [value]
        while pending and total <= limit:
            current = pending.pop()
            known = self.counts.get(id(current))
            if known is not None:
                total += known[0]
                continue
            total += 1 + len(current)
            pending.extend(item for item in current if isinstance(item, tuple))
            total -= sum(1 for item in current if isinstance(item, tuple))
        return total


#: Objects a call makes from fewer items are not counted: hashing each costs a
#: few steps.
COUNTED_WORK = 64


class _ItemCount:
    """What is left of a budget of items visited in one load of ``input_size``
    bytes: ``floor`` plus ``per_byte`` for each byte (both read at the load)."""

    __slots__ = ("left", "name", "why")

    def __init__(
        self, name: str, floor: int, per_byte: int, input_size: int | None, why: tuple[str, str]
    ) -> None:
        self.name = name
        self.left = floor + per_byte * (input_size or 0)
        doing, because = why
        self.why = (
            f"{doing} more than {floor:,} items plus {per_byte} per byte of input ({because})"
        )

    def charge(self, items: int, opcode: str, offset: Any) -> None:
        """``items`` visited, or about to be (``offset`` is called for the
        message only)."""
        self.left -= items
        if self.left < 0:
            raise exceeded(self.name, opcode, offset(), self.why)


class Hashing(_ItemCount):
    """The ``hashing`` budget: the items that hashing dict keys, set members
    and the arguments of calls visits, in all. A tuple's hash is not cached, so
    a key of a million items' work placed again and again costs a million each
    time."""

    __slots__ = ()

    def __init__(self, input_size: int | None) -> None:
        why = (
            "hashing the keys, members and call arguments of this load would visit",
            "tuples are hashed again each time they are placed",
        )
        super().__init__("hashing", HASHING_FLOOR, HASHING_PER_INPUT_BYTE, input_size, why)

    def placed(
        self, opcode: str, items: Any, counts: dict[int, tuple[int, Any]], offset: Any
    ) -> None:
        """Charge what ``opcode`` hashes of ``items``, the objects it takes off the
        stack in order (above the mark, or its operands): one rule for
        restricted loading and ``inspect``'s dry run (``HASHES``)."""
        self.keys(HASHES[opcode](items), counts, opcode, offset)

    def keys(self, keys: Any, counts: dict[int, tuple[int, Any]], opcode: str, offset: Any) -> None:
        """Charge hashing each of ``keys`` (the counted ones cost their count)."""
        work = 0
        for key in keys:
            known = counts.get(id(key))
            if known is not None:
                work += known[0]
        if work:
            self.charge(work, opcode, offset)


class Walking(_ItemCount):
    """The ``walk`` budget: the items the checks' walks visit, in all (charged
    after each walk, which visits a container once: one walk costs at most what
    the load holds)."""

    __slots__ = ()

    def __init__(self, input_size: int | None) -> None:
        why = (
            "the checks of this load's call arguments and states would visit",
            "a shared container is walked again for each call it is given to",
        )
        super().__init__("walk", WALK_FLOOR, WALK_PER_INPUT_BYTE, input_size, why)


def _pairs(items: Any) -> Any:
    return items[::2]


def _members(items: Any) -> Any:
    return items


def _key(items: Any) -> Any:
    return items[:1]


#: What each opcode that hashes takes of its items (in the order they were
#: pushed: above the mark, or SETITEM's key and value): the keys of (key, value)
#: pairs, or every member.
HASHES = {
    "DICT": _pairs,
    "SETITEMS": _pairs,
    "SETITEM": _key,
    "ADDITEMS": _members,
    "FROZENSET": _members,
}


class Depths:
    """How deeply each object one load built nests, by id (objects are kept
    alive with their depth, so an id stays theirs; an object not here is 0)."""

    __slots__ = ("depths",)

    def __init__(self) -> None:
        self.depths: dict[int, tuple[int, Any]] = {}

    def of(self, obj: Any) -> int:
        known = self.depths.get(id(obj))
        return 0 if known is None else known[0]

    def holds(self, container: Any, items: Any, opcode: str, offset: Any) -> None:
        """``container`` now holds ``items`` (an iterable): one deeper than the
        deepest, at least. ``offset`` is called for the message only."""
        deepest = max(map(self.of, items), default=0)
        if deepest + 1 > self.of(container):
            if deepest + 1 > MAX_DEPTH:
                raise exceeded(
                    "depth",
                    opcode,
                    offset(),
                    f"what it builds would nest more than {MAX_DEPTH:,} deep (freeing objects "
                    "nested that deep can crash the process)",
                )
            self.depths[id(container)] = (deepest + 1, container)


class Allowance:
    """What is left of the ``memory`` budget of one load of ``input_size``
    bytes (``None``: a stream of unknown length, the floor only)."""

    __slots__ = ("memory",)

    def __init__(self, input_size: int | None) -> None:
        self.memory = MEMORY_FLOOR + MEMORY_PER_INPUT_BYTE * (input_size or 0)

    def allocate(self, nbytes: int, opcode: str, offset: Any, what: str) -> None:
        """``what`` is about to allocate about ``nbytes`` (``offset`` is called
        for the message only)."""
        if nbytes > self.memory:
            raise exceeded(
                "memory",
                opcode,
                offset(),
                f"{what} may allocate about {nbytes:,} bytes, past the {self.memory:,} left "
                "for this load (its arguments' items, the lazy sequences and the sizes "
                "it is given)",
            )
        self.memory -= nbytes


def lazy_length(obj: Any) -> int | None:
    """The length of a sequence that is stated, not stored (a ``range``, a
    pandas ``RangeIndex``), or None for anything else."""
    kind = type(obj)
    if kind is range or (
        kind.__name__ == "RangeIndex" and getattr(kind, "__module__", "").startswith("pandas")
    ):
        try:
            return len(obj)
        except OverflowError:  # longer than sys.maxsize
            return sys.maxsize
    return None
