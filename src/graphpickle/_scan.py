"""``inspect(data)``: read a pickle without executing it.

Loading a pickle runs code: it imports modules and calls what the payload names.
This module never loads. It walks the opcodes (``pickletools.genops``) and keeps
a small model of the unpickler's stack and memo, holding only what it needs to
know: strings (module and attribute names), tuples and dicts of them, and which
callables were applied to what. From that it reports what a receiver must be
able to import, what was pickled by value and how many bytes it spans, the
out-of-band buffers it expects, and globals that can run commands on load.
"""

from __future__ import annotations

import pickletools
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ._restricted import imported_name
from .errors import UnpicklingError

__all__ = ["InspectReport", "inspect"]

# cloudpickle's reconstructors: what a by-value object is built with.
_CLOUDPICKLE = "cloudpickle.cloudpickle"
_BY_VALUE_MAKERS = {
    "_make_function": "function",
    "_make_skeleton_class": "class",
    "_make_skeleton_enum": "class",
    "dynamic_subimport": "module",
    "_make_typevar": "typevar",
}
_STATE_SETTERS = {"_function_setstate", "_class_setstate"}

# Globals that can run commands or code when a payload is loaded. Exact names,
# and modules whose every attribute counts ("*").
DANGEROUS: dict[str, str] = {
    "os.system": "runs a shell command",
    "posix.system": "runs a shell command",
    "nt.system": "runs a shell command",
    "os.popen": "runs a shell command",
    "os.execv": "replaces the process",
    "os.execve": "replaces the process",
    "os.execl": "replaces the process",
    "os.execlp": "replaces the process",
    "os.execvp": "replaces the process",
    "os.spawnv": "starts a process",
    "os.spawnl": "starts a process",
    "os.posix_spawn": "starts a process",
    "posix.posix_spawn": "starts a process",
    "os.remove": "deletes files",
    "os.unlink": "deletes files",
    "os.rmdir": "deletes files",
    "shutil.rmtree": "deletes files",
    "builtins.eval": "evaluates code",
    "builtins.exec": "executes code",
    "builtins.compile": "compiles code",
    "builtins.__import__": "imports any module",
    "builtins.open": "opens files",
    "builtins.breakpoint": "starts a debugger",
    "importlib.import_module": "imports any module",
    "pickle.loads": "loads a nested pickle",
    "_pickle.loads": "loads a nested pickle",
    "marshal.loads": "loads code objects",
    "pty.spawn": "starts a process",
    "subprocess.*": "starts processes",
    "runpy.*": "runs modules",
    "ctypes.*": "calls native code",
    "socket.*": "opens network connections",
    "code.*": "runs an interactive interpreter",
}


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        lines = [f"pickle: {self.nbytes:,} bytes, protocol {self.protocol}"]
        lines.append(
            f"imports ({len(self.modules)} modules): " + (", ".join(self.modules) or "none")
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
        return "\n".join(lines)


class _Mark:
    pass


@dataclass
class _Global:
    module: str
    name: str


@dataclass
class _Applied:
    """The result of REDUCE: ``callable(*args)``."""

    func: Any
    args: Any
    start: int
    by_value: _ByValueInProgress | None = None


@dataclass
class _ByValueInProgress:
    kind: str
    name: str
    start: int
    end: int


_SHOWN_GROUPS = 20
_MARK = _Mark()
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


def inspect(
    data: bytes | bytearray | memoryview, *, buffers: Iterable[Any] | None = None
) -> InspectReport:
    """Report what loading the pickle ``data`` would import and build, without
    loading it. ``buffers``, if given, are the out-of-band buffers (for sizes).

    Raises :class:`graphpickle.UnpicklingError` if ``data`` is not a complete pickle.
    """
    raw = bytes(data)
    try:
        return _Scan(raw).run(buffers)
    except UnpicklingError:
        raise
    except Exception as exc:  # pickletools raises ValueError on malformed input
        raise UnpicklingError(f"not a readable pickle: {exc}") from exc


class _Scan:
    def __init__(self, data: bytes) -> None:
        self.data = data
        # The stack holds (value, offset where the value's opcodes start).
        self.stack: list[tuple[Any, int]] = []
        self.memo: dict[int, tuple[Any, int]] = {}
        self.globals: dict[str, None] = {}
        self.modules: set[str] = set()
        self.objects: list[_ByValueInProgress] = []
        self.protocol = 0
        self.buffers = self.readonly = self.persistent = 0
        self.stopped = False

    def run(self, buffers: Iterable[Any] | None) -> InspectReport:
        for opcode, arg, pos in pickletools.genops(self.data):
            self.step(opcode, arg, pos or 0)  # pos is None only for file-less streams
        if not self.stopped:
            raise UnpicklingError("not a readable pickle: no STOP opcode")
        names = tuple(self.globals)
        sizes = None if buffers is None else tuple(memoryview(b).nbytes for b in buffers)
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
            dangerous=tuple(_dangerous(names)),
        )

    def push(self, value: Any, pos: int) -> None:
        self.stack.append((value, pos))

    def pop(self) -> tuple[Any, int]:
        if not self.stack:
            raise UnpicklingError("not a readable pickle: stack underflow")
        return self.stack.pop()

    def pop_to_mark(self) -> list[tuple[Any, int]]:
        items: list[tuple[Any, int]] = []
        while True:
            value, pos = self.pop()
            if value is _MARK:
                items.reverse()
                return items
            items.append((value, pos))

    def step(self, opcode: Any, arg: Any, pos: int) -> None:
        name = opcode.name
        # Protocols 0 and 1 have no PROTO opcode: the newest opcode used tells.
        self.protocol = max(self.protocol, opcode.proto)
        if name == "PROTO":
            self.protocol = arg
        elif name in _STRING_OPS:
            self.push(arg if isinstance(arg, str) else _OTHER, pos)
        elif name == "GLOBAL" or name == "INST":
            module, _, attr = arg.partition(" ")
            if name == "INST":
                self.pop_to_mark()
            self.push(self.record_global(module, attr), pos)
        elif name == "STACK_GLOBAL":
            (attr, _), (module, start) = self.pop(), self.pop()
            if not isinstance(module, str) or not isinstance(attr, str):
                self.record_global("<unknown>", "<computed>")
                self.push(_OTHER, start)
            else:
                self.push(self.record_global(module, attr), start)
        elif name in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"):
            index = len(self.memo) if name == "MEMOIZE" else arg
            self.memo[index] = self.stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            if arg not in self.memo:
                raise UnpicklingError(f"not a readable pickle: memo key {arg} is missing")
            value, _ = self.memo[arg]
            self.push(value, pos)
        elif name == "MARK":
            self.push(_MARK, pos)
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            count = int(name[-1])
            items = [self.pop() for _ in range(count)][::-1]
            self.push(tuple(v for v, _ in items), items[0][1])
        elif name == "TUPLE":
            items = self.pop_to_mark()
            self.push(tuple(v for v, _ in items), pos)
        elif name == "EMPTY_DICT":
            self.push({}, pos)
        elif name in ("SETITEM", "SETITEMS"):
            pairs = [self.pop(), self.pop()][::-1] if name == "SETITEM" else self.pop_to_mark()
            target, _ = self.stack[-1] if self.stack else (None, 0)
            if isinstance(target, dict):
                for (key, _), (value, _) in zip(pairs[::2], pairs[1::2], strict=False):
                    if isinstance(key, str):
                        target[key] = value
        elif name == "REDUCE":
            (args, _), (func, start) = self.pop(), self.pop()
            self.push(self.apply(func, args, start, pos), start)
        elif name == "NEXT_BUFFER":
            self.buffers += 1
            self.push(_OTHER, pos)
        elif name == "READONLY_BUFFER":
            self.readonly += 1
        elif name in ("PERSID", "BINPERSID"):
            self.persistent += 1
            if name == "BINPERSID":
                self.pop()
            self.push(_OTHER, pos)
        elif name == "DUP":
            self.stack.append(self.stack[-1])
        elif name == "STOP":
            self.pop()
            self.stopped = True
        else:
            self.generic(opcode, pos)

    def generic(self, opcode: Any, pos: int) -> None:
        """Any other opcode: apply its stack effect, tracking no content."""
        before = opcode.stack_before
        if pickletools.markobject in before:
            self.pop_to_mark()
            before = before[: before.index(pickletools.markobject)]
        start = pos
        for _ in before:
            _, start = self.pop()
        for _ in opcode.stack_after:
            self.push(_OTHER, start)

    def record_global(self, module: str, attr: str) -> _Global:
        module, attr = imported_name(module, attr)
        self.globals[f"{module}.{attr}"] = None
        self.modules.add(module)
        return _Global(module, attr)

    def apply(self, func: Any, args: Any, start: int, pos: int) -> Any:
        """REDUCE: note by-value constructors and the state setters that finish them."""
        if not isinstance(func, _Global) or func.module != _CLOUDPICKLE:
            return _OTHER
        kind = _BY_VALUE_MAKERS.get(func.name)
        if kind is not None:
            obj = _ByValueInProgress(kind, _name_from_args(kind, args), start, pos + 1)
            self.objects.append(obj)
            return _Applied(func, args, start, obj)
        if func.name in _STATE_SETTERS and isinstance(args, tuple) and len(args) == 2:
            target, state = args
            if isinstance(target, _Applied) and target.by_value is not None:
                target.by_value.end = pos + 1
                name = _name_from_state(state)
                if name and target.by_value.kind == "function":
                    target.by_value.name = name
        return _OTHER


def _name_from_args(kind: str, args: Any) -> str:
    if not isinstance(args, tuple):
        return "?"
    if kind == "class" and len(args) > 1:
        # _make_skeleton_class(type, name, ...); _make_skeleton_enum(bases, name, qualname, ...)
        name = args[2] if len(args) > 2 and isinstance(args[2], str) else args[1]
        return name if isinstance(name, str) else "?"
    if kind in ("module", "typevar") and args and isinstance(args[0], str):
        return args[0]
    return "?"


def _name_from_state(state: Any) -> str | None:
    """A by-value function's name, from cloudpickle's slot state."""
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        module, qualname = state[1].get("__module__"), state[1].get("__qualname__")
        if isinstance(qualname, str):
            return f"{module}.{qualname}" if isinstance(module, str) else qualname
    return None


def _dangerous(names: Iterable[str]) -> list[DangerousGlobal]:
    found = []
    for name in names:
        why = DANGEROUS.get(name) or DANGEROUS.get(f"{name.split('.')[0]}.*")
        if why is not None:
            found.append(DangerousGlobal(name, why))
    return found
