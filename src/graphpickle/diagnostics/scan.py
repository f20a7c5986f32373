"""``inspect(data)``: read a pickle without running what it names, and judge it.

Loading a pickle runs code: it imports modules and calls what the payload
names. ``inspect`` never loads. It reads the payload twice:

- **A walk of the opcodes** (``pickletools.genops``) with a small model of the
  unpickler's stack, marks and memo, holding only what it needs: strings
  (module and attribute names), tuples and dicts of them, which callables were
  applied to what, and which objects are globals. From that it reports what a
  receiver must be able to import, what was pickled by value and how many bytes
  it spans, the out-of-band buffers it expects, and what looks dangerous.
- **A dry run of the C unpickler** (``dry_load.py``), the parser
  ``pickle.loads`` itself uses, with inert stand-ins for every global. If the
  two readings disagree (which names, in which order, where it stops), the
  payload is crafted to show a scanner something else than the loader, and is
  flagged.

Every pickle in the bytes is read (a file may hold several, and ``pickle.load``
in a loop reads them all). A malformed payload is reported up to the point
where the loader would stop, with what it would have done before.

The verdict has three levels, and fails closed: ``"data"`` (restricted loading
with :data:`graphpickle.DATA_ONLY` accepts it: a payload the walk finds to be
data is then loaded so, to run the checks only real objects allow),
``"imports"`` (it imports
globals outside that list, each one trusted by the operator, ``trust=``, or a
harmless builtin), ``"code"`` (anything not proven harmless: any other global,
known to be dangerous (``gadgets.py`` says why) or not, code pickled by value,
what the walk does not follow (calls of what calls return, persistent ids), a
name computed at load time, a change of a global's state, an EXT opcode, or
parsers that disagree).
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import UnpicklingError
from ..restricted import budgets
from ..restricted.data_checks import check_call
from ..restricted.unpickler import AllowList, imported_name, is_dunder
from .dry_load import DryRun, dry_load, long_text_number
from .gadgets import danger_of

__all__ = ["Finding", "InspectReport", "NotAPickleError", "inspect"]

# cloudpickle's reconstructors, and graphpickle's code blocks' (what the dask
# integration sends a worker that loads them): what a by-value object is built with.
_CLOUDPICKLE = "cloudpickle.cloudpickle"
_BLOCKS = "graphpickle.core.blocks"
_BY_VALUE_MAKERS = {
    (_CLOUDPICKLE, "_make_function"): "function",
    (_CLOUDPICKLE, "_make_skeleton_class"): "class",
    (_CLOUDPICKLE, "_make_skeleton_enum"): "class",
    (_CLOUDPICKLE, "dynamic_subimport"): "module",
    (_CLOUDPICKLE, "_make_typevar"): "typevar",
    (_BLOCKS, "make_function"): "function",
    (_BLOCKS, "function_once"): "function",
    (_BLOCKS, "function_ref"): "function",
    (_BLOCKS, "make_class"): "class",
}
# A function block's calls given the block alone make a globals dict, not a function.
_FUNCTION_BLOCKS = {(_BLOCKS, "function_once"), (_BLOCKS, "function_ref")}
_STATE_SETTERS = {"_function_setstate", "_class_setstate"}
_FUNCTION_MAKERS = {f"{module}.{name}" for (module, name), kind in _BY_VALUE_MAKERS.items()
                    if kind == "function"}  # fmt: skip

# Verdict levels, in order.
DATA, IMPORTS, CODE = "data", "imports", "code"
_RANK = {DATA: 0, IMPORTS: 1, CODE: 2}


@dataclass(frozen=True)
class Finding:
    """One reason for the verdict: its level ("imports" or "code") and what it is."""

    level: str
    what: str


@dataclass(frozen=True)
class ByValueObject:
    kind: str  # "function", "class", "module" or "typevar"
    name: str
    nbytes: int  # bytes from its constructor to the end of its state (nested ones included)
    offset: int


@dataclass(frozen=True)
class DangerousGlobal:
    name: str
    why: str


@dataclass(frozen=True)
class InspectReport:
    """What a payload would do on load, read without loading it."""

    nbytes: int
    protocol: int
    modules: tuple[str, ...]  # every module the receiver imports
    globals: tuple[str, ...]  # every "module.qualname" it looks up
    by_value: tuple[ByValueObject, ...] = field(default_factory=tuple)
    buffers: int = 0  # out-of-band buffers expected
    readonly_buffers: int = 0
    buffer_sizes: tuple[int, ...] | None = None  # known when buffers were given
    persistent_ids: int = 0
    dangerous: tuple[DangerousGlobal, ...] = field(default_factory=tuple)
    verdict: str = DATA  # "data", "imports" or "code"
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    pickles: int = 1  # complete pickles in the bytes; each one is read
    error: str | None = None  # where and why the loader would stop early, if it would

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"verdict: {self.verdict} ({_VERDICT_WORDS[self.verdict]})",
            f"pickle: {self.nbytes:,} bytes, protocol {self.protocol}"
            + (f", {self.pickles} pickles" if self.pickles != 1 else ""),
        ]
        lines.append(
            f"imports ({len(self.modules)} module{'' if len(self.modules) == 1 else 's'}): "
            + (", ".join(self.modules) or "none")
        )
        lines.append(f"globals ({len(self.globals)}): " + (", ".join(self.globals) or "none"))
        lines.append(f"pickled by value: {len(self.by_value)}")
        groups: dict[tuple[str, str], list[int]] = {}
        for obj in self.by_value:
            groups.setdefault((obj.kind, obj.name), []).append(obj.nbytes)
        ranked = sorted(groups.items(), key=lambda item: sum(item[1]), reverse=True)
        for (kind, name), sizes in ranked[:_SHOWN_GROUPS]:
            count = f" x{len(sizes)}" if len(sizes) > 1 else ""
            lines.append(f"  {sum(sizes):>10,} B  {kind:8}  {name}{count}")
        if len(ranked) > _SHOWN_GROUPS:
            lines.append(f"  ... {len(ranked) - _SHOWN_GROUPS} more (--json lists all)")
        buffers = f"out-of-band buffers: {self.buffers} ({self.readonly_buffers} read-only)"
        if self.buffer_sizes is not None:
            buffers += f", {sum(self.buffer_sizes):,} bytes"
        lines.append(buffers)
        if self.persistent_ids:
            lines.append(f"persistent ids: {self.persistent_ids} (the loader must resolve them)")
        if self.dangerous:
            lines.append("DANGEROUS on load:")
            lines.extend(f"  {d.name}: {d.why}" for d in self.dangerous)
        else:
            lines.append("dangerous globals: none found")
        shown = [f for f in self.findings if f.level == CODE] or list(self.findings)
        if shown:
            lines.append("findings:")
            lines.extend(f"  [{f.level}] {f.what}" for f in shown[:_SHOWN_GROUPS])
            if len(shown) > _SHOWN_GROUPS:
                lines.append(f"  ... {len(shown) - _SHOWN_GROUPS} more (--json lists all)")
        if self.error is not None:
            lines.append(f"malformed: {self.error}")
        return "\n".join(lines)


_VERDICT_WORDS = {
    DATA: "plain data: restricted loading with DATA_ONLY accepts it",
    IMPORTS: "imports globals outside the data-only list, each one trusted or harmless",
    CODE: "can run code or change the interpreter on load",
}


class _Mark:
    pass


@dataclass
class _Global:
    module: str
    name: str
    # The dry run's view of this object: the global it is derived from and how
    # many calls away (``getattr(G, "name")`` is builtins.getattr, one call).
    root: str = ""
    depth: int = 0


@dataclass
class _Applied:
    """The result of REDUCE: ``callable(*args)``."""

    func: Any
    args: Any
    start: int
    by_value: _ByValueInProgress | None = None

    def __repr__(self) -> str:  # args may nest exponentially: never show them
        return f"_Applied({_show(self.func)})"


@dataclass
class _ByValueInProgress:
    kind: str
    name: str
    start: int
    end: int


class _Malformed(Exception):
    """Where the C unpickler would stop: the walk stops there too."""


_SHOWN_GROUPS = 20
_OTHER = object()  # a value whose content the scan does not track
_STRING_OPS = {
    "STRING",
    "BINSTRING",
    "SHORT_BINSTRING",
    "UNICODE",
    "BINUNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE8",
}
_INT_OPS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"}
_CHANGES = {"BUILD", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "ADDITEMS"}
_DATA_ONLY: AllowList | None = None
# Globals restricted loading replaces by a narrower stand-in (or, for getattr,
# resolves as a dotted global): their only data use is the modelled call.
_GETATTR = "builtins.getattr"
_GUARDED = {"operator.itemgetter", "_codecs.encode", _GETATTR}


def _sets_a_dunder(state: Any) -> bool:
    """Whether a BUILD state (as the walk tracks it: a dict, or a (dict, dict)
    pair) sets a dunder: in the instance's dict, or as an attribute."""
    parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
    return any(isinstance(part, dict) and any(map(is_dunder, part)) for part in parts)


def _data_only() -> AllowList:
    global _DATA_ONLY
    if _DATA_ONLY is None:
        from ..restricted.data_only import DATA_ONLY

        _DATA_ONLY = AllowList(DATA_ONLY)
    return _DATA_ONLY


def inspect(
    data: bytes | bytearray | memoryview | str | os.PathLike[str],
    *,
    buffers: Iterable[Any] | None = None,
    trust: Iterable[str] = (),
) -> InspectReport:
    """Report what loading the pickle ``data`` would import, build and do,
    without running what it names, with a verdict: ``"data"``, ``"imports"`` or
    ``"code"`` (a pickle that reads as data is then loaded with restricted
    loading and DATA_ONLY to confirm it).
    ``data`` is the pickle's bytes (any bytes-like object), or the path of a
    file that holds it (``str`` or ``os.PathLike``: the file is read, as
    ``graphpickle inspect FILE`` reads it). ``buffers``, if given, are the
    out-of-band buffers (for sizes). ``trust`` names modules, packages or objects
    whose globals count as imports rather than as code (``["numpy", "dask"]``):
    a global outside :data:`graphpickle.DATA_ONLY`, the trusted names and a
    short list of harmless builtins counts as able to run code, known or not.

    Every pickle in ``data`` is read. A malformed payload is reported up to the
    point where the loader would stop (``report.error`` says where and why).
    :class:`graphpickle.UnpicklingError` is raised for bytes that are not a
    pickle at all (empty, or text): a verdict is given only for bytes that start
    with a protocol header (PROTO 2 or later), or that the loader reads to the
    end as complete pickles, each to its STOP (protocols 0 and 1 have no
    header), where only the last may stop early, and only if it starts with a
    protocol header. ``OSError`` is raised if a path cannot be read, and
    ``TypeError`` for anything else than bytes or a path.
    """
    raw = _read(data)
    cut = long_text_number(raw)
    if cut is not None:  # both readers stop there, as restricted loading does
        raw = raw[:cut]
    scan = _Scan(raw, Trust(trust))
    scan.run()
    dry = dry_load(raw)
    if cut is not None:
        scan.error = dry.error = (
            f"BudgetExceededError: a number written as text at byte {cut} has more than "
            f"{budgets.MAX_DIGITS:,} digits (budget 'digits')"
        )
    why = _not_a_pickle(raw, scan, dry)
    if why is not None:
        refused = NotAPickleError(f"not a readable pickle: {why}")
        end = dry.end if dry.skipped is None else scan.end
        if end and (dry.pickles if dry.skipped is None else scan.pickles):
            # pickle.load runs the complete pickles before it reaches the rest
            before = inspect(raw[:end], buffers=buffers, trust=trust)
            refused.report = replace(
                before, nbytes=len(raw), error=f"at byte {end}, the rest is not a pickle: {why}"
            )
        raise refused
    scan.compare(dry)
    return scan.report(buffers)


class NotAPickleError(UnpicklingError):
    """What :func:`inspect` raises for bytes that are not a pickle. Complete
    pickles before the unreadable rest (a malicious pickle followed by junk)
    are still what ``pickle.load`` would run: ``report`` is their report (its
    verdict, dangerous globals and findings; ``error`` says where the rest
    starts), or None when there are none."""

    report: InspectReport | None = None


def _read(data: object) -> bytes:
    """The bytes to inspect: ``data``'s own, or those of the file it names."""
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as f:
            return f.read()
    try:
        with memoryview(data) as view:  # type: ignore[arg-type]
            return view.tobytes()
    except TypeError:
        raise TypeError(
            "inspect() takes a pickle's bytes (bytes, bytearray, memoryview) or the path "
            f"of a file holding one (str or os.PathLike), not {type(data).__name__}"
        ) from None


def _has_protocol_header(data: bytes, at: int) -> bool:
    """Whether a pickle starts at ``at`` with PROTO 2 or later: every pickle of
    protocol 2 or later starts so, and text never does (0x80 is no ASCII
    character, nor the first byte of a UTF-8 one)."""
    header = data[at : at + 2]
    return (
        len(header) == 2
        and header[:1] == pickle.PROTO
        and 2 <= header[1] <= pickle.HIGHEST_PROTOCOL
    )


def _not_a_pickle(data: bytes, scan: _Scan, dry: DryRun) -> str | None:
    """Why ``data`` is not a pickle, or ``None`` if it is one: it starts with a
    protocol header, or the loader (the C unpickler's dry run; the scan's
    reading where no dry run was made) reads it to the end as complete
    pickles, where only the last may stop early, and only if it starts with a
    protocol header."""
    if not data:
        return "no data"
    if _has_protocol_header(data, 0):
        return None
    if dry.skipped is None:
        pickles, end, error = dry.pickles, dry.end, dry.error
    else:
        pickles, end, error = scan.pickles, scan.end, scan.error
    if error is None or _has_protocol_header(data, end):
        return None
    read = f"after {pickles} complete pickle(s), to byte {end}, " if pickles else ""
    why = f"no protocol header, and {read}the loader stops: {_cut(error, 120)}"
    names = [f"{module}.{name}" for module, name in dry.names]
    if names:  # what an unpickler would still try before it stops
        shown = ", ".join(_cut(name, 60) for name in names[:3])
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        why += f" (before it stops, it would look up {shown}{more})"
    return why


# Callables outside DATA_ONLY that only compute on the data they are given:
# counted as imports, not as code. Anything else outside the allow-list and
# the operator's trust counts as able to run code: the table of known gadgets
# (gadgets.py) says *why* for the names it knows, and decides nothing.
HARMLESS = frozenset(
    f"builtins.{name}"
    for name in ("len", "abs", "min", "max", "sorted", "reversed", "enumerate", "zip", "divmod")
)


class Trust:
    """The names an operator trusts (``inspect(trust=...)``, ``--trust``): a
    module or package covers every name in it and its submodules (``"numpy"``),
    an object its attributes too (``"mypackage.Point"``)."""

    __slots__ = ("entries",)

    def __init__(self, entries: Iterable[str] = ()) -> None:
        if isinstance(entries, str):
            raise TypeError("trust must be a collection of names, not a single string")
        self.entries = tuple(sorted({e.strip() for e in entries if e.strip()}))

    def covers(self, full: str) -> bool:
        return any(full == e or full.startswith(e + ".") for e in self.entries)


class _Scan:
    def __init__(self, data: bytes, trust: Trust | None = None) -> None:
        self.data = data
        self.trust = trust or Trust()
        # The stack holds (value, offset where the value's opcodes start); a
        # MARK moves it onto the metastack, as the C unpickler fences it off.
        self.stack: list[tuple[Any, int]] = []
        self.metastack: list[list[tuple[Any, int]]] = []
        self.memo: dict[int, tuple[Any, int]] = {}
        self.names: list[str] = []  # each name as written, in order (the dry run's view)
        self.globals: dict[str, None] = {}
        self.judged: set[tuple[tuple[str, str], str]] = set()
        self.modules: set[str] = set()
        self.objects: list[_ByValueInProgress] = []
        self.findings: dict[Finding, None] = {}
        self.dangerous: dict[str, str] = {}
        self.protocol = 0  # the report's: the newest protocol any opcode needs
        self.proto = 0  # the unpickler's, per pickle: set by PROTO only
        # Calls of guarded globals (and of what they return) that the walk
        # modelled, by (root, depth): the dry run's calls are set beside them.
        self.guarded_calls: dict[tuple[str, int], int] = {}
        self.buffers = self.readonly = self.persistent = 0
        self.pickles = 0
        self.end = 0  # where the last complete pickle ends
        self.error: str | None = None
        self.frame_end: int | None = None

    # -- reading -------------------------------------------------------------------

    def run(self) -> None:
        start = 0
        while start < len(self.data):
            try:
                start = self.read_one(start)
            except _Malformed as exc:
                self.error = str(exc)
                return
            self.pickles += 1
            self.end = start

    def read_one(self, start: int) -> int:
        """Read the pickle at ``start``; return where it ends."""
        self.stack, self.metastack, self.memo = [], [], {}
        self.frame_end = None
        self.proto = 0
        stream = _stream_at(self.data, start)
        pos = start
        dispatch, generic = _DISPATCH, _Scan.generic
        try:
            # Each opcode: its handler in ``_DISPATCH`` (as ``pickle.py``'s
            # unpickler has ``dispatch``), or ``generic``.
            for opcode, arg, at in pickletools.genops(stream):
                pos = at if at is not None else pos
                name = opcode.name
                if self.frame_end is not None or name == "FRAME":
                    self.check_frame(name, arg, pos)
                if opcode.proto > self.protocol:  # (protocols 0 and 1 have no PROTO)
                    self.protocol = opcode.proto
                dispatch.get(name, generic)(self, opcode, arg, pos)
                if name == "STOP":
                    end: int = stream.tell()
                    return end
        except _Malformed as exc:
            raise _Malformed(f"at byte {pos}: {exc}") from None
        except Exception as exc:  # pickletools raises ValueError on bad input
            raise _Malformed(f"at byte {pos}: {exc}") from None
        raise _Malformed(f"at byte {pos}: no STOP opcode (the pickle is truncated)")

    def check_frame(self, name: str, arg: Any, pos: int) -> None:
        """FRAME says how many bytes the next opcodes take. The C unpickler
        (``pickle.loads``) only checks that they exist; the Python one
        (``pickle._Unpickler``, restricted loading) also refuses an opcode that
        runs past the frame, or a frame that starts inside another. A payload
        whose frames the two read differently was made to confuse parsers."""
        if self.frame_end is not None and pos > self.frame_end:
            self.flag(CODE, f"at byte {pos}: an opcode runs past the end of its frame "
                      "(unpicklers that check frames and ones that do not read this payload differently)")  # fmt: skip
            self.frame_end = None
        if name != "FRAME":
            if self.frame_end is not None and pos == self.frame_end:
                self.frame_end = None
            return
        if self.frame_end is not None and pos != self.frame_end:
            self.flag(CODE, f"at byte {pos}: a frame starts inside another frame "
                      "(unpicklers that check frames and ones that do not read this payload differently)")  # fmt: skip
        end = pos + 9 + arg
        if end > len(self.data):
            raise _Malformed(
                f"FRAME of {arg:,} bytes, but only {len(self.data) - pos - 9:,} follow"
            )
        self.frame_end = end

    # -- the stack model --------------------------------------------------------------

    def push(self, value: Any, pos: int) -> None:
        self.stack.append((value, pos))

    def pop(self, pos: int) -> tuple[Any, int]:
        """Pop a value that the opcode at ``pos`` uses (not calls)."""
        item = self.pop_raw()
        if isinstance(item[0], (_Global, _Applied)):  # (what ``used`` judges)
            self.used(item[0], pos)
        return item

    def pop_raw(self) -> tuple[Any, int]:
        if not self.stack:
            raise _Malformed("unpickling stack underflow")
        return self.stack.pop()

    def pop_mark(self, pos: int | None = None) -> list[tuple[Any, int]]:
        """Pop to the mark; with ``pos``, the opcode there uses the items."""
        if not self.metastack:
            raise _Malformed("could not find MARK")
        items, self.stack = self.stack, self.metastack.pop()
        if pos is not None:
            for value, _ in items:
                self.used(value, pos)
        return items

    def used(self, value: Any, pos: int) -> None:
        """A guarded global is data only as the callable of a modelled call
        (REDUCE, OBJ, INST). Used any other way (an item, an argument, NEWOBJ's
        class, the result), restricted loading's narrower stand-in is not what
        a plain load gets; getattr itself reaches anything."""
        if not isinstance(value, (_Global, _Applied)):
            return
        func = value.func if isinstance(value, _Applied) else value
        if not isinstance(func, _Global) or func.depth:
            return
        full = f"{func.module}.{func.name}"
        if full not in _GUARDED:
            return
        if full == _GETATTR:
            self.flag(CODE, f"at byte {pos}: builtins.getattr is used other than as the "
                      "callable of a call (it reaches any attribute)")  # fmt: skip
        elif isinstance(value, _Global):
            self.flag(CODE, f"at byte {pos}: {full} is used other than as the callable "
                      "of a call (restricted loading hands out only that use)")  # fmt: skip
        elif full == "operator.itemgetter":
            self.flag(CODE, f"at byte {pos}: what operator.itemgetter returns is used "
                      "other than as the callable of a call")  # fmt: skip

    def top(self, name: str) -> tuple[Any, int]:
        if not self.stack:
            raise _Malformed(f"{name} on an empty stack")
        return self.stack[-1]

    # -- the opcodes, each with its handler: (self, opcode, arg, pos) ----------------

    def op_proto(self, opcode: Any, arg: Any, pos: int) -> None:
        self.protocol = self.proto = arg

    def op_frame(self, opcode: Any, arg: Any, pos: int) -> None:
        pass  # check_frame has read it

    def op_string(self, opcode: Any, arg: Any, pos: int) -> None:
        self.push(arg if isinstance(arg, str) else _OTHER, pos)

    def op_int(self, opcode: Any, arg: Any, pos: int) -> None:
        self.push(arg if type(arg) is int else _OTHER, pos)

    def op_global(self, opcode: Any, arg: Any, pos: int) -> None:
        module, _, attr = arg.partition(" ")
        self.push(self.record_global(module, attr, pos), pos)

    def op_inst(self, opcode: Any, arg: Any, pos: int) -> None:
        # INST calls the global it names with the marked items, as OBJ does.
        module, _, attr = arg.partition(" ")
        items = self.pop_mark(pos)
        func = self.record_global(module, attr, pos)
        self.push(self.apply(func, tuple(v for v, _ in items), pos, pos), pos)

    def op_obj(self, opcode: Any, arg: Any, pos: int) -> None:
        items = self.pop_mark()
        if not items:
            raise _Malformed("unpickling stack underflow")
        (func, start), rest = items[0], items[1:]
        for value, _ in rest:
            self.used(value, pos)
        self.push(self.apply(func, tuple(v for v, _ in rest), start, pos), start)

    def op_stack_global(self, opcode: Any, arg: Any, pos: int) -> None:
        (attr, _), (module, start) = self.pop(pos), self.pop(pos)
        if not isinstance(module, str) or not isinstance(attr, str):
            self.flag(CODE, f"at byte {pos}: a global whose name is computed while loading")
            self.names.append("<computed>")
            self.push(_OTHER, start)
        else:
            self.push(self.record_global(module, attr, pos), start)

    def op_ext(self, opcode: Any, arg: Any, pos: int) -> None:
        self.flag(CODE, f"at byte {pos}: extension code {arg} names a global through the "
                  "receiver's copyreg registry, which a scan cannot see")  # fmt: skip
        self.names.append(f"<extension {arg}>")
        self.push(_OTHER, pos)

    def op_memoize(self, opcode: Any, arg: Any, pos: int) -> None:
        self.memo[len(self.memo)] = self.top(opcode.name)

    def op_put(self, opcode: Any, arg: Any, pos: int) -> None:
        if arg < 0:
            raise _Malformed("negative PUT argument")
        self.memo[arg] = self.top(opcode.name)

    def op_get(self, opcode: Any, arg: Any, pos: int) -> None:
        if arg not in self.memo:
            raise _Malformed(f"Memo value not found at index {arg}")
        value, _ = self.memo[arg]
        self.push(value, pos)

    def op_mark(self, opcode: Any, arg: Any, pos: int) -> None:
        self.metastack.append(self.stack)
        self.stack = []

    def op_pop(self, opcode: Any, arg: Any, pos: int) -> None:
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def op_pop_mark(self, opcode: Any, arg: Any, pos: int) -> None:
        self.pop_mark()

    def op_small_tuple(self, opcode: Any, arg: Any, pos: int) -> None:
        count = int(opcode.name[-1])
        stack = self.stack
        items = stack[-count:]
        del stack[-count:]
        for value, _ in reversed(items):  # (used as popped: the top first)
            self.used(value, pos)
        if len(items) < count:
            raise _Malformed("unpickling stack underflow")
        stack.append((tuple(v for v, _ in items), items[0][1]))

    def op_tuple(self, opcode: Any, arg: Any, pos: int) -> None:
        items = self.pop_mark(pos)
        self.push(tuple(v for v, _ in items), pos)

    def op_empty_tuple(self, opcode: Any, arg: Any, pos: int) -> None:
        self.push((), pos)

    def op_empty_dict(self, opcode: Any, arg: Any, pos: int) -> None:
        self.push({}, pos)

    def op_change(self, opcode: Any, arg: Any, pos: int) -> None:
        self.change(opcode.name, pos)

    def op_reduce(self, opcode: Any, arg: Any, pos: int) -> None:
        (args, _), (func, start) = self.pop(pos), self.pop_raw()
        self.push(self.apply(func, args, start, pos), start)

    def op_newobj(self, opcode: Any, arg: Any, pos: int) -> None:
        name = opcode.name
        kwargs = None if name == "NEWOBJ" else self.pop(pos)[0]
        args, _ = self.pop(pos)
        cls, start = self.pop_raw()
        self.newobj(name, cls, args, kwargs, pos)
        # What was instantiated is gone from the model; the dry run records it.
        self.push(_OTHER, start)

    def op_next_buffer(self, opcode: Any, arg: Any, pos: int) -> None:
        self.buffers += 1
        self.push(_OTHER, pos)

    def op_readonly_buffer(self, opcode: Any, arg: Any, pos: int) -> None:
        self.readonly += 1
        self.top(opcode.name)

    def op_persid(self, opcode: Any, arg: Any, pos: int) -> None:
        self.persistent += 1
        if opcode.name == "BINPERSID":
            self.pop(pos)
        self.flag(CODE, f"at byte {pos}: a persistent id, which the receiver's "
                  "persistent_load resolves (restricted loading refuses it)")  # fmt: skip
        self.push(_OTHER, pos)

    def op_dup(self, opcode: Any, arg: Any, pos: int) -> None:
        self.stack.append(self.top(opcode.name))

    def op_stop(self, opcode: Any, arg: Any, pos: int) -> None:
        self.pop(pos)

    def generic(self, opcode: Any, arg: Any, pos: int) -> None:
        """Any other opcode: apply its stack effect, tracking no content."""
        before = opcode.stack_before
        if pickletools.markobject in before:
            self.pop_mark(pos)
            before = before[: before.index(pickletools.markobject)]
        start = pos
        for _ in before:
            _, start = self.pop(pos)
        for _ in opcode.stack_after:
            self.push(_OTHER, start)

    def change(self, name: str, pos: int) -> None:
        """BUILD, SETITEM(S), APPEND(S), ADDITEMS: the object they change must be
        one the payload made, never a global."""
        if name in ("SETITEMS", "APPENDS", "ADDITEMS"):
            items = self.pop_mark(pos)
            target, _ = self.top(name)
            if name == "SETITEMS" and isinstance(target, dict):
                values = [v for v, _ in items]
                for key, value in zip(values[::2], values[1::2], strict=False):
                    if isinstance(key, str):
                        target[key] = value
        else:
            pairs = [self.pop(pos) for _ in range(2 if name == "SETITEM" else 1)][::-1]
            target, _ = self.top(name)
            if name == "SETITEM" and isinstance(target, dict) and isinstance(pairs[0][0], str):
                target[pairs[0][0]] = pairs[1][0]
            if name == "BUILD" and _sets_a_dunder(pairs[0][0]):
                self.flag(CODE, f"at byte {pos}: a BUILD state sets a dunder on an object (what "
                          "a later opcode would call: restricted loading refuses it)")  # fmt: skip
        if isinstance(target, _Global):
            self.flag(CODE, f"at byte {pos}: {name} changes the global "
                      f"{target.module}.{target.name} while loading")  # fmt: skip

    # -- what the names mean ------------------------------------------------------------

    def record_global(
        self,
        module: str,
        attr: str,
        pos: int,
        *,
        written: bool = True,
        mapped: bool | None = True,
        root: str = "",
        depth: int = 0,
    ) -> _Global:
        """A global the loader resolves. ``mapped``: whether Python 2 names are
        mapped (the pickle's protocol, set by PROTO, is below 3); None when not
        known (a name only the loader read): both readings are judged."""
        if written:  # a name in the bytes, which the loader hands to find_class
            self.names.append(f"{module}.{attr}")
        raw = (module, attr)
        if mapped is None or (mapped and self.proto < 3):
            module, attr = imported_name(module, attr)
        full = f"{module}.{attr}"
        if (raw, full) in self.judged:  # a name used again is judged once
            return _Global(module, attr, root or full, depth)
        self.judged.add((raw, full))
        self.globals[full] = None
        self.modules.add(module)
        # getattr(global, "name") is judged as the dotted global at each use
        # (self.getattr), as restricted loading resolves it.
        if full != _GETATTR and not _data_only().exactly(module, attr):
            why = danger_of(module, attr)
            if why is not None:
                self.dangerous[full] = why
                self.flag(CODE, f"{_cut(full)}: {why}")
            elif not all(part.isidentifier() for part in (*module.split("."), *attr.split("."))):
                self.flag(CODE, f"{_cut(full)!r}: not a Python name (crafted for a parser)")
            elif self.trust.covers(full):
                self.flag(IMPORTS, f"{_cut(full)}: outside the data-only list, trusted")
            elif full in HARMLESS:
                self.flag(IMPORTS, f"{_cut(full)}: outside the data-only list, a harmless callable")
            else:
                self.flag(
                    CODE,
                    f"{_cut(full)}: outside the data-only list and not known to be harmless: "
                    f"counted as able to run code (trust {module.split('.')[0]!r} to count "
                    "it as an import)",
                )
        if raw != (module, attr):  # the name as written is judged too
            why = danger_of(*raw)
            if why is not None:
                self.dangerous[f"{raw[0]}.{raw[1]}"] = why
                self.flag(CODE, f"{_cut(f'{raw[0]}.{raw[1]}')}: {why}")
        return _Global(module, attr, root or full, depth)

    def apply(self, func: Any, args: Any, start: int, pos: int) -> Any:
        """REDUCE, OBJ and INST: by-value constructors, the state setters that
        finish them, by-value code called while loading, the data-only guarded
        calls, and calls of what the scan does not track."""
        key = _call_key(func)
        if key is not None:
            self.guarded_calls[key] = self.guarded_calls.get(key, 0) + 1
        if isinstance(func, _Applied):
            return self.apply_result(func, args, pos)
        if isinstance(func, _Global):
            return self.apply_global(func, args, start, pos)
        if func is _OTHER:
            self.flag(CODE, f"at byte {pos}: calls an object made while loading, "
                      "which the scan does not follow")  # fmt: skip
        return _OTHER

    def apply_result(self, func: _Applied, args: Any, pos: int) -> Any:
        """A call of what a call returned: by-value code called while loading,
        ``operator.itemgetter(-1)`` on a tuple, or what the scan does not follow."""
        inner = func.func
        if func.by_value is not None and func.by_value.kind == "function":
            self.flag(CODE, f"at byte {pos}: calls {func.by_value.name}, a function "
                      "pickled by value, while loading")  # fmt: skip
        elif _is(inner, "operator", "itemgetter") and _is_last(func.args):
            if isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], tuple):
                return args[0][-1] if args[0] else _OTHER
            self.flag(CODE, f"at byte {pos}: operator.itemgetter(-1) applied to "
                      "something other than a tuple")  # fmt: skip
        elif func.by_value is None or func.by_value.kind != "class":
            self.flag(CODE, f"at byte {pos}: calls what a call returned "
                      f"({_show(inner)}(...)), which the scan does not follow")  # fmt: skip
        return _OTHER

    def apply_global(self, func: _Global, args: Any, start: int, pos: int) -> Any:
        """A call of a global: getattr resolved as a dotted global, the guarded
        calls' arguments checked (``_ARGUMENT_RULES``, then what restricted
        loading refuses), by-value constructors and their state setters."""
        name = (func.module, func.name)
        if name == ("builtins", "getattr"):
            return self.getattr(args, pos)
        rule = _ARGUMENT_RULES.get(name)
        problem = None if rule is None else rule(args)
        if problem is not None:
            self.flag(CODE, f"at byte {pos}: {problem}")
        problem = check_call(f"{func.module}.{func.name}", args if isinstance(args, tuple) else ())
        if problem is not None:  # what restricted loading refuses in a call's arguments
            self.flag(CODE, f"at byte {pos}: {_cut(func.module + '.' + func.name)}(...) with "
                      f"{problem}")  # fmt: skip
        kind = _BY_VALUE_MAKERS.get(name)
        if name in _FUNCTION_BLOCKS and not (isinstance(args, tuple) and len(args) > 1):
            kind = None
        if kind is not None:
            obj = _ByValueInProgress(kind, _name_from_args(kind, args), start, pos + 1)
            self.objects.append(obj)
            return _Applied(func, args, start, obj)
        if func.module != _CLOUDPICKLE:
            return _Applied(func, args, start)
        if func.name in _STATE_SETTERS and isinstance(args, tuple) and len(args) == 2:
            _set_state(*args, pos)
        return _OTHER

    def newobj(self, name: str, cls: Any, args: Any, kwargs: Any, pos: int) -> None:
        """NEWOBJ(_EX) calls ``cls.__new__``: a guarded global is data only as
        the callable of a call, its arguments are checked as a call's (what
        restricted loading refuses there), and an object the scan does not
        track may be anything."""
        if isinstance(cls, _Global) and not cls.depth:
            full = f"{cls.module}.{cls.name}"
            if full == _GETATTR:
                self.used(cls, pos)
            elif full in _GUARDED:
                self.flag(CODE, f"at byte {pos}: {name} of {full} (restricted loading "
                          "allows it only as the callable of a call)")  # fmt: skip
            problem = check_call(full, args if isinstance(args, tuple) else (), kwargs)
            if problem is not None:
                self.flag(CODE, f"at byte {pos}: {name} of {_cut(full)} with {problem}")
        elif isinstance(cls, _Applied):
            if cls.by_value is None or cls.by_value.kind != "class":
                self.flag(CODE, f"at byte {pos}: {name} of what a call returned "
                          f"({_show(cls.func)}(...)), which the scan does not follow")  # fmt: skip
        elif cls is _OTHER:
            self.flag(CODE, f"at byte {pos}: {name} of an object made while loading, "
                      "which the scan does not follow")  # fmt: skip

    def getattr(self, args: Any, pos: int) -> Any:
        """``getattr(global, "name")`` (how pickle writes a method of a class) is
        the dotted global ``global.name``, judged as one; getattr on anything
        else reaches what the scan cannot know."""
        if isinstance(args, tuple) and len(args) == 2 and isinstance(args[1], str):
            target, attr = args
            if isinstance(target, _Global):
                dotted = f"{target.name}.{attr}"
                return self.record_global(
                    target.module, dotted, pos, written=False, root=_GETATTR, depth=1
                )
            if attr.startswith("__"):
                self.flag(CODE, f"at byte {pos}: getattr(..., {_show(attr)}) reaches an "
                          "object's internals")  # fmt: skip
            else:
                self.flag(CODE, f"at byte {pos}: getattr(..., {_show(attr)}) of an "
                          "object made while loading")  # fmt: skip
            return _OTHER
        self.flag(CODE, f"at byte {pos}: getattr with a name computed while loading")
        return _OTHER

    def flag(self, level: str, what: str) -> None:
        self.findings[Finding(level, what)] = None

    # -- the verdict ------------------------------------------------------------------

    def compare(self, dry: DryRun) -> None:
        """Set the dry run of the C unpickler beside the walk."""
        if dry.skipped is not None:
            self.flag(CODE, f"no dry run: {dry.skipped}")
            return
        self.compare_events(dry)
        self.compare_guarded_calls(dry)
        self.compare_names(dry)
        if dry.refused:  # (whether or not a scan reads on: pickle.loads would spend it)
            self.flag(CODE, f"restricted loading's budgets refuse it before the C unpickler "
                      f"reads it ({dry.error})")  # fmt: skip
        elif (dry.error is None) != (self.error is None):
            self.flag(CODE, "the C unpickler and a scan disagree on whether the payload is "
                      f"well formed (loader: {dry.error or 'reads it'}; scan: {self.error or 'reads it'})")  # fmt: skip

    def compare_events(self, dry: DryRun) -> None:
        """What the dry run saw that is code whatever the walk judged: a global
        changed, code pickled by value called."""
        for event in dry.events:
            if event.kind == "change" and event.origin == "global":
                self.flag(CODE, f"changes the global {_cut(event.name)} while loading")
            elif (
                event.kind == "call"
                and _makes_function(event.root)
                and event.name == f"{event.root}()"
            ):
                self.flag(CODE, f"calls code pickled by value ({event.root}) while loading")

    def compare_guarded_calls(self, dry: DryRun) -> None:
        """A call of a guarded global (or of what it returned) that the walk did
        not model is one it judged as something else."""
        calls: dict[tuple[str, int], int] = {}
        for event in dry.events:
            if event.kind == "call" and event.root in _GUARDED and event.depth <= 1:
                key = (event.root, event.depth)
                calls[key] = calls.get(key, 0) + 1
        for (root, depth), count in sorted(calls.items()):
            modelled = self.guarded_calls.get((root, depth), 0)
            if count > modelled:
                what = root if depth == 0 else f"what {root} returns"
                self.flag(CODE, f"the C unpickler calls {what} {count} time(s), a scan "
                          f"modelled {modelled} of them (the call is not judged)")  # fmt: skip

    def compare_names(self, dry: DryRun) -> None:
        """The names the loader reads, against those the walk read."""
        loader_names = [f"{module}.{name}" for module, name in dry.names]
        written = set(self.names)
        for module, name in dry.names:
            if f"{module}.{name}" not in written:  # judge what only the loader reads
                self.record_global(module, name, -1, written=False, mapped=None)
        if loader_names != self.names or dry.pickles != self.pickles:
            self.flag(CODE, "the C unpickler reads this payload differently from a scan: "
                      f"{_difference(self.names, loader_names, self.pickles, dry.pickles)}")  # fmt: skip

    def report(self, buffers: Iterable[Any] | None) -> InspectReport:
        names = tuple(self.globals)
        sizes = None if buffers is None else tuple(memoryview(b).nbytes for b in buffers)
        if self.by_value_code():
            self.flag(CODE, "holds code pickled by value: it runs if the loaded objects are called")
        verdict = max((f.level for f in self.findings), key=_RANK.__getitem__, default=DATA)
        if verdict == DATA and self.error is None:
            failure = self.restricted_failure(buffers)
            if failure is not None and failure.__cause__ is None:  # a refusal, a budget
                self.flag(CODE, f"restricted loading with DATA_ONLY refuses it ({_words(failure)})")
                verdict = CODE
            elif failure is not None:  # an allowed constructor's error: malformed data
                self.error = f"restricted loading with DATA_ONLY stops: {_words(failure)}"
        findings = tuple(self.findings)
        return InspectReport(
            nbytes=len(self.data),
            protocol=self.protocol,
            modules=tuple(sorted(self.modules)),
            globals=tuple(sorted(names)),
            by_value=tuple(
                ByValueObject(o.kind, o.name, o.end - o.start, o.start) for o in self.objects
            ),
            buffers=self.buffers,
            readonly_buffers=self.readonly,
            buffer_sizes=sizes,
            persistent_ids=self.persistent,
            dangerous=tuple(DangerousGlobal(n, why) for n, why in sorted(self.dangerous.items())),
            verdict=verdict,
            findings=findings,
            pickles=self.pickles,
            error=self.error,
        )

    def restricted_failure(self, buffers: Iterable[Any] | None) -> Exception | None:
        """What "data" means, checked by doing it: each pickle is loaded with
        restricted loading and DATA_ONLY (under its budgets), which runs the
        checks a walk cannot make on objects it does not build (a Categorical's
        codes, an array's state). What it raised (an UnpicklingError: a refusal
        or a budget, or, with a cause, what an allowed constructor raised), or
        None; not checked when the pickle takes out-of-band buffers that were
        not given."""
        from ..restricted.unpickler import restricted_load

        if self.buffers and buffers is None:
            return None
        stream = io.BytesIO(self.data)
        given = iter(buffers) if buffers is not None else None
        try:
            while stream.tell() < len(self.data):
                restricted_load(stream, _data_only(), given)
        except (pickle.UnpicklingError, EOFError) as exc:
            return exc
        return None

    def by_value_code(self) -> bool:
        return any(o.kind in ("function", "class") for o in self.objects)


def _words(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_cut(str(exc), 200)}"


def _stream_at(data: bytes, start: int) -> io.BytesIO:
    stream = io.BytesIO(data)
    stream.seek(start)
    return stream


# Each opcode the walk models, and its handler; any other is :meth:`_Scan.generic`.
_DISPATCH: dict[str, Callable[[_Scan, Any, Any, int], None]] = {
    "PROTO": _Scan.op_proto,
    "FRAME": _Scan.op_frame,
    **dict.fromkeys(_STRING_OPS, _Scan.op_string),
    **dict.fromkeys(_INT_OPS, _Scan.op_int),
    "GLOBAL": _Scan.op_global,
    "INST": _Scan.op_inst,
    "OBJ": _Scan.op_obj,
    "STACK_GLOBAL": _Scan.op_stack_global,
    **dict.fromkeys(("EXT1", "EXT2", "EXT4"), _Scan.op_ext),
    "MEMOIZE": _Scan.op_memoize,
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT"), _Scan.op_put),
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET"), _Scan.op_get),
    "MARK": _Scan.op_mark,
    "POP": _Scan.op_pop,
    "POP_MARK": _Scan.op_pop_mark,
    **dict.fromkeys(("TUPLE1", "TUPLE2", "TUPLE3"), _Scan.op_small_tuple),
    "TUPLE": _Scan.op_tuple,
    "EMPTY_TUPLE": _Scan.op_empty_tuple,
    "EMPTY_DICT": _Scan.op_empty_dict,
    **dict.fromkeys(_CHANGES, _Scan.op_change),
    "REDUCE": _Scan.op_reduce,
    **dict.fromkeys(("NEWOBJ", "NEWOBJ_EX"), _Scan.op_newobj),
    "NEXT_BUFFER": _Scan.op_next_buffer,
    "READONLY_BUFFER": _Scan.op_readonly_buffer,
    **dict.fromkeys(("PERSID", "BINPERSID"), _Scan.op_persid),
    "DUP": _Scan.op_dup,
    "STOP": _Scan.op_stop,
}


def _set_state(target: Any, state: Any, pos: int) -> None:
    """cloudpickle's ``_function_setstate``/``_class_setstate`` on a by-value
    object the walk made: where it ends, and a function's name from its state."""
    if isinstance(target, _Applied) and target.by_value is not None:
        target.by_value.end = pos + 1
        name = _name_from_state(state)
        if name and target.by_value.kind == "function":
            target.by_value.name = name


def _itemgetter_problem(args: Any) -> str | None:
    return None if _is_last(args) else f"operator.itemgetter{_show(args)} (data uses (-1) only)"


def _encode_problem(args: Any) -> str | None:
    if (
        isinstance(args, tuple)
        and len(args) == 2
        and isinstance(args[0], str)
        and args[1] == "latin1"
    ):
        return None
    return "_codecs.encode other than (str, 'latin1')"


# The guarded calls whose arguments data uses in one shape only: what is wrong
# with others, or None.
_ARGUMENT_RULES: dict[tuple[str, str], Callable[[Any], str | None]] = {
    ("operator", "itemgetter"): _itemgetter_problem,
    ("_codecs", "encode"): _encode_problem,
}


def _is(value: Any, module: str, name: str) -> bool:
    return isinstance(value, _Global) and value.module == module and value.name == name


def _is_last(args: Any) -> bool:
    """``(-1,)``: the only itemgetter argument data uses."""
    return isinstance(args, tuple) and len(args) == 1 and type(args[0]) is int and args[0] == -1


def _call_key(func: Any) -> tuple[str, int] | None:
    """(root, depth) of a callable derived from a guarded global, as the dry
    run labels its call: the global itself is depth 0, what it returns 1."""
    depth = 0
    if isinstance(func, _Applied):
        func, depth = func.func, 1
    if not isinstance(func, _Global) or func.root not in _GUARDED:
        return None
    depth += func.depth
    return (func.root, depth) if depth <= 1 else None


_SHOWN_ITEMS = 4


def _show(value: Any, level: int = 0) -> str:
    """A payload's value in a finding, bounded: a payload can nest and share
    tuples so that a full repr is exponential, or hold huge strings and ints."""
    if isinstance(value, str):
        return repr(_cut(value, 40))
    if type(value) is int:
        return str(value) if value.bit_length() <= 64 else "<a large int>"
    if isinstance(value, _Global):
        return _cut(f"{value.module}.{value.name}")
    if isinstance(value, tuple):
        if level >= 2:
            return "(...)"
        shown = [_show(v, level + 1) for v in value[:_SHOWN_ITEMS]]
        if len(value) > _SHOWN_ITEMS:
            shown.append("...")
        return "(" + ", ".join(shown) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, _Applied):
        return f"{_show(value.func, 2)}(...)"
    return "<an object made while loading>"


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _makes_function(root: str) -> bool:
    return root in _FUNCTION_MAKERS


def _difference(scan: list[str], loader: list[str], scanned: int, loaded: int) -> str:
    if scanned != loaded:
        return f"{loaded} pickle(s) for the loader, {scanned} for a scan"
    for i, (a, b) in enumerate(zip(scan, loader, strict=False)):
        if a != b:
            return f"global #{i + 1} is {_cut(b)!r} for the loader, {_cut(a)!r} for a scan"
    return f"{len(loader)} globals for the loader, {len(scan)} for a scan"


def _name_from_args(kind: str, args: Any) -> str:
    if not isinstance(args, tuple):
        return "?"
    if kind == "class" and len(args) > 1:
        # _make_skeleton_class(type, name, ...); _make_skeleton_enum(bases, name, qualname, ...)
        name = args[2] if len(args) > 2 and isinstance(args[2], str) else args[1]
        return name if isinstance(name, str) else "?"
    if kind in ("module", "typevar") and args and isinstance(args[0], str):
        return args[0]
    # blocks.make_function(code, base_globals, closure, layout, attributes, name,
    # qualname, annotations, kwdefaults, defaults, module, ...)
    if kind == "function" and len(args) > 10 and isinstance(args[6], str):
        return f"{args[10]}.{args[6]}" if isinstance(args[10], str) else args[6]
    return "?"


def _name_from_state(state: Any) -> str | None:
    """A by-value function's name, from cloudpickle's slot state."""
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        module, qualname = state[1].get("__module__"), state[1].get("__qualname__")
        if isinstance(qualname, str):
            return f"{module}.{qualname}" if isinstance(module, str) else qualname
    return None
