"""Load samples in fresh interpreters, under an audit hook that stops their effects.

    from security_harness import run
    outcomes = run(samples, "control")      # pickle.loads: must show each effect
    outcomes = run(samples, "restricted")   # graphpickle.loads(..., allowed=DATA_ONLY)
    outcomes = run(samples, "benign")       # restricted, and the result must equal the original

Each child interpreter imports what plain data needs (graphpickle, numpy,
pandas, every module ``DATA_ONLY`` names) and then forks a copy of itself, which
installs ``sys.addaudithook`` and loads samples one after the other. While a
sample loads, the hook raises :class:`Stopped` at every event that would run a
command, start a process, load native code, open a file for writing, touch the
network, delete or create files, set a trace or profile function, or compile or
execute code outside an import (and at the import the sample declares as its
effect), so nothing really runs. ``_posixsubprocess.fork_exec`` raises no audit
event: the copy replaces it with a stand-in that does, before anything loads.

After each sample the copy compares ``sys.path``, ``sys.meta_path``,
``sys.path_hooks``, ``sys.modules``, ``builtins``, the ``copyreg`` registries,
the trace and profile functions, and the dict of every class and module that
``DATA_ONLY`` names (and the items of their module-level containers) with what
they were before. Modules the sample imported are removed from ``sys.modules``
again. A sample that changed anything ends its copy, and the next sample gets a
fresh copy of the clean interpreter, so no sample sees another's damage. A
sample that kills its copy is reported as "crashed", one still loading after
``SAMPLE_TIMEOUT`` seconds as "timeout".
"""

from __future__ import annotations

import base64
import builtins
import copyreg
import json
import os
import signal
import subprocess
import sys
import tempfile
import types
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MODES", "Outcome", "run"]

MODES = ("control", "restricted", "benign")
_HERE = Path(__file__).resolve().parent

# Audit events stopped whenever a sample loads: each is something plain data never does.
STOPPED_EVENTS = frozenset(
    {
        "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty",
        "os.kill", "os.killpg", "subprocess.Popen", "_posixsubprocess.fork_exec",
        "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "ctypes.cdata",
        "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
        "socket.getaddrinfo", "socket.gethostbyname",
        "urllib.Request", "http.client.connect", "smtplib.connect", "ftplib.connect",
        "poplib.connect", "imaplib.open", "nntplib.connect", "telnetlib.Telnet.open",
        "webbrowser.open",
        "shutil.rmtree", "shutil.copyfile", "shutil.copytree", "shutil.move", "shutil.chown",
        "os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown",
        "os.truncate", "os.symlink", "os.link", "os.putenv", "os.unsetenv", "os.utime",
        "os.chdir", "tempfile.mkstemp", "tempfile.mkdtemp",
        "sys.setprofile", "sys.settrace", "sys.addaudithook",
        "cpython.run_command", "cpython.run_module",
    }
)  # fmt: skip
#: A file the "state that lies" samples make an allowed class read (a payload's path).
READ_TARGET = "/tmp/graphpickle-attack-read"
SAMPLE_TIMEOUT = 30  # seconds; a sample still loading then is reported as "timeout"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


#: The effect of an attack that plain pickle itself refuses on this Python (a
#: sample's effect may differ between versions: see security_corpus).
REFUSED = "refused by pickle itself"


@dataclass
class Outcome:
    """What loading one sample did, in one mode."""

    name: str
    outcome: str  # "loaded", "raised", "crashed" (the child died) or "timeout"
    error: str = ""  # the exception's type, "module.Name"
    message: str = ""
    unpickling_error: bool = False  # a pickle.UnpicklingError (ForbiddenGlobalError is one)
    forbidden: bool = False  # a graphpickle.ForbiddenGlobalError
    stopped: list[str] = field(default_factory=list)  # effects the hook stopped
    imported: list[str] = field(default_factory=list)  # modules the load imported
    changed: list[str] = field(default_factory=list)  # state found changed afterwards
    equal: bool | None = None  # benign mode: the result equals the original

    def effects(self) -> set[str]:
        """Everything the load did or tried: the samples' ``effect`` vocabulary."""
        return {*self.stopped, *(f"import:{m}" for m in self.imported), *self.changed}

    def shows(self, effect: str) -> bool:
        if effect == REFUSED:  # what plain pickle does with it: refuse it, unharmed
            return self.refused()
        return effect in self.effects()

    def refused(self) -> bool:
        """Raised before any effect, nothing stopped, nothing changed."""
        return self.outcome == "raised" and not self.stopped and not self.changed

    def blocked(self, effect: str) -> bool:
        """Refused before the effect, nothing stopped, nothing changed."""
        return self.refused() and (effect == REFUSED or not self.shows(effect))


def run(samples: Sequence[Any], mode: str, *, workers: int = 2) -> dict[str, Outcome]:
    """Load every sample (``security_corpus.Sample``) in ``mode``, in ``workers``
    child interpreters at a time."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    shares = [list(samples[i::workers]) for i in range(workers) if samples[i::workers]]
    with ThreadPoolExecutor(workers) as pool:
        parts = pool.map(lambda share: _run_child(share, mode), shares)
        return {o.name: o for part in parts for o in part}


def _run_child(samples: list[Any], mode: str) -> list[Outcome]:
    request = {
        "mode": mode,
        "samples": [
            {
                "name": s.name,
                "data": base64.b64encode(s.data).decode(),
                "effect": s.effect,
                "multi": s.multi,
            }
            for s in samples
        ],
    }
    with tempfile.TemporaryDirectory(prefix="gp-security-") as tmp:
        results = Path(tmp) / "results.jsonl"
        process = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(results)],
            input=json.dumps(request).encode(),
            stdout=subprocess.DEVNULL,  # what samples print is not the results
            stderr=subprocess.PIPE,
            cwd=tmp,  # a relative path a sample writes lands in the temporary directory
            env={
                **os.environ,
                "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1",
            },  # no threads to fork
            timeout=SAMPLE_TIMEOUT * len(samples) + 60,
            check=False,
        )
        lines = results.read_text().splitlines() if results.exists() else []
        if process.returncode != 0 or len(lines) != len(samples):
            raise RuntimeError(
                f"the {mode} child failed (exit {process.returncode}, {len(lines)} of "
                f"{len(samples)} samples reported):\n{process.stderr.decode()[-3000:]}"
            )
        return [Outcome(**json.loads(line)) for line in lines]


# --- the child -----------------------------------------------------------------


class Stopped(Exception):
    """The audit hook stopped an effect before it happened."""


class _Guard:
    """The audit hook and what it saw for the sample being loaded."""

    def __init__(self) -> None:
        self.armed = False
        self.effect = ""
        self.stopped: list[str] = []
        self.imported: list[str] = []

    def arm(self, effect: str) -> None:
        self.effect, self.stopped, self.imported = effect, [], []
        self.armed = True

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        key = None
        if event in STOPPED_EVENTS:
            key = event
        elif event == "open" and not isinstance(args[0], int):  # an fd is no file opened
            mode, flags = args[1], args[2]
            writes = isinstance(mode, str) and any(c in mode for c in "wax+")
            if writes or (isinstance(flags, int) and flags & _WRITE_FLAGS):
                key = "open:w"
            elif str(args[0]) == READ_TARGET:  # a path the payload chose, read
                key = "open:r"
        elif event in ("compile", "exec"):
            if not _inside_import():
                key = event
        elif event == "import":
            self.imported.append(args[0])
            if self.effect == f"import:{args[0]}":
                key = self.effect
        if key is not None:
            self.stopped.append(key)
            raise Stopped(key)


def _inside_import() -> bool:
    """Whether the import system is running a module's code (imports compile
    and execute; the samples must not)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _audited_fork_exec(*args: Any) -> Any:
    sys.audit("_posixsubprocess.fork_exec", args[0])
    raise AssertionError("the audit hook lets _posixsubprocess.fork_exec through")


class _Snapshot:
    """What a payload must not change, held by reference: values are compared
    by identity (``id()`` itself is audited, and slow under a hook)."""

    def __init__(self, classes: dict[str, type], modules: dict[str, Any]) -> None:
        self.classes, self.modules = classes, modules
        self.path = (sys.path, list(sys.path))
        self.meta_path, self.path_hooks = list(sys.meta_path), list(sys.path_hooks)
        self.sys_modules = dict(sys.modules)
        self.builtins = dict(vars(builtins))
        self.copyreg = [dict(r) for r in _copyreg_registries()]
        self.hooks = (sys.gettrace(), sys.getprofile())
        self.class_dicts = {name: dict(vars(cls)) for name, cls in classes.items()}
        self.module_dicts = {name: _module_state(mod) for name, mod in modules.items()}

    def changes(self) -> tuple[list[str], list[str]]:
        """(what changed, modules that were imported since)."""
        changed = []
        if sys.path is not self.path[0] or not _same(sys.path, self.path[1]):
            changed.append("sys.path")
        if not _same(sys.meta_path, self.meta_path) or not _same(sys.path_hooks, self.path_hooks):
            changed.append("sys.meta_path")
        now = dict(sys.modules)
        if any(now.get(k) is not v for k, v in self.sys_modules.items()):
            changed.append("sys.modules")
        if not _same(vars(builtins), self.builtins):
            changed.append("builtins")
        if not all(_same(r, b) for r, b in zip(_copyreg_registries(), self.copyreg, strict=True)):
            changed.append("copyreg")
        if sys.gettrace() is not self.hooks[0] or sys.getprofile() is not self.hooks[1]:
            changed.append("sys.settrace")
        for name, cls in self.classes.items():
            if not _same(vars(cls), self.class_dicts[name]):
                changed.append(f"class:{name}")
        for name, mod in self.modules.items():
            if not _module_unchanged(mod, self.module_dicts[name]):
                changed.append(f"module:{name}")
        imported = [k for k in now if k not in self.sys_modules]
        return changed, imported


def _copyreg_registries() -> list[Any]:
    return [copyreg._extension_registry, copyreg._inverted_registry, copyreg.dispatch_table]  # type: ignore[attr-defined]


def _same(now: Any, before: Any) -> bool:
    """The same items, each the same object (dicts: keys and values; lists: in order)."""
    if isinstance(before, dict):
        if len(now) != len(before):
            return False
        missing = object()
        return all(now.get(k, missing) is v for k, v in before.items())
    if isinstance(before, list):
        return len(now) == len(before) and all(a is b for a, b in zip(now, before, strict=True))
    return bool(now == before)


def _module_state(module: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A module's names (not submodules, which an import adds), and a copy of
    the items of each of its dicts, lists and sets."""
    names = {
        key: value
        for key, value in list(vars(module).items())
        if not isinstance(value, types.ModuleType) and key != "__builtins__"
    }  # builtins are compared on their own
    # exact types only: pytz's lazy lists and sets fill themselves in when read
    items = {k: type(v)(v) for k, v in names.items() if type(v) in (dict, list, set)}
    return names, items


def _module_unchanged(module: Any, before: tuple[dict[str, Any], dict[str, Any]]) -> bool:
    names, items = before
    now = _module_state(module)[0]
    return _same(now, names) and all(_same(now[k], copy) for k, copy in items.items())


def _allowed_objects() -> tuple[dict[str, type], dict[str, Any]]:
    """Every class DATA_ONLY names, and the modules they and its module entries live in."""
    import importlib
    import warnings

    from graphpickle import DATA_ONLY

    classes: dict[str, type] = {}
    modules: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy.core is deprecated, and still named
        for entry in sorted(DATA_ONLY):
            try:
                modules[entry] = importlib.import_module(entry)
                continue
            except ImportError:
                pass
            module_name, _, name = entry.rpartition(".")
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue  # another numpy or pandas major version's name
            modules[module_name] = module
            obj = getattr(module, name, None)
            if isinstance(obj, type):
                classes[entry] = obj
            elif isinstance(obj, types.ModuleType):
                modules[entry] = obj
    return classes, modules


def _load(mode: str, data: bytes, multi: bool) -> Any:
    import io
    import pickle

    import graphpickle

    if mode == "control":
        if not multi:
            return pickle.loads(data)
        stream = io.BytesIO(data)
        while stream.tell() < len(data):
            result = pickle.load(stream)
        return result
    if not multi:
        return graphpickle.loads(data, allowed=graphpickle.DATA_ONLY)
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        result = graphpickle.load(stream, allowed=graphpickle.DATA_ONLY)
    return result


def _child_main(results_path: str) -> int:
    """Prepare a clean interpreter once, then fork a copy of it for the samples:
    a copy loads samples until one changes state, and the next gets a new copy."""
    # What plain data needs is imported before any sample, and numpy.testing too:
    # numpy 1.26 runs a subprocess when it is imported, which is not the samples' doing.
    import numpy.testing  # noqa: F401
    import pandas  # noqa: F401

    import graphpickle  # noqa: F401

    request = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    sys.stdin = open(os.devnull)  # noqa: SIM115  (for the process's life: samples must not read the request)
    mode, samples = request["mode"], request["samples"]
    originals = {}
    if mode == "benign":
        from security_corpus import benign

        originals = {s.name: s.value for s in benign()}
    classes, modules = _allowed_objects()
    open(results_path, "w").close()
    with open(READ_TARGET, "w") as target:  # what the readers would read (a zone file)
        target.write("TZif")
    done = 0
    while done < len(samples):
        pid = os.fork()
        if pid == 0:
            try:
                _load_samples(mode, samples[done:], originals, classes, modules, results_path)
            finally:
                os._exit(0)  # never back into the template's code
        _, status = os.waitpid(pid, 0)
        with open(results_path) as f:
            reported = sum(1 for _ in f)
        if reported == done:  # the copy died inside samples[done]
            alarm = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM
            outcome = Outcome(samples[done]["name"], "timeout" if alarm else "crashed")
            with open(results_path, "a") as out:
                out.write(json.dumps(outcome.__dict__) + "\n")
            reported += 1
        done = reported
    return 0


def _load_samples(
    mode: str,
    samples: list[dict[str, Any]],
    originals: dict[str, Any],
    classes: dict[str, type],
    modules: dict[str, Any],
    results_path: str,
) -> None:
    """In a fresh copy of the template: load samples under the audit hook until
    one changes state (the copy is no longer clean then: it must end)."""
    import _posixsubprocess
    import pickle

    from security_corpus import same

    import graphpickle

    _posixsubprocess.fork_exec = _audited_fork_exec
    guard = _Guard()
    sys.addaudithook(guard.hook)
    snapshot = _Snapshot(classes, modules)  # valid while no sample changes anything
    with open(results_path, "a") as out:
        for item in samples:
            data = base64.b64decode(item["data"])
            outcome = Outcome(item["name"], "loaded")
            signal.alarm(SAMPLE_TIMEOUT)
            guard.arm(item["effect"])
            try:
                result = _load(mode, data, item["multi"])
            except BaseException as exc:  # a sample may raise anything, SystemExit too
                guard.armed = False
                outcome.outcome = "raised"
                outcome.error = f"{type(exc).__module__}.{type(exc).__qualname__}"
                outcome.message = str(exc)[:300]
                outcome.unpickling_error = isinstance(exc, pickle.UnpicklingError)
                outcome.forbidden = isinstance(exc, graphpickle.ForbiddenGlobalError)
            else:
                guard.armed = False
                if mode == "benign":
                    outcome.equal = same(originals[item["name"]], result)
            signal.alarm(0)
            outcome.stopped = list(dict.fromkeys(guard.stopped))
            outcome.changed, imported = snapshot.changes()
            outcome.imported = list(dict.fromkeys(guard.imported + imported))
            for name in imported:  # the next sample must be able to import it again
                sys.modules.pop(name, None)
            out.write(json.dumps(outcome.__dict__) + "\n")
            out.flush()
            if outcome.changed:
                return


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    sys.exit(_child_main(sys.argv[2]))
