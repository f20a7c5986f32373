"""Compiled extensions: found, checked, or ``None``; and which are active.

Each part of graphpickle that has C code keeps it beside the Python it
accelerates (``core/_speedups.c``, ``wire/_frames.c``,
``determinism/_sets.c``, ``determinism/_values.c``) and loads it with :func:`load`. The Python versions
give the same output and run when an extension is not built, is turned off
(``GRAPHPICKLE_NO_SPEEDUPS``) or is stale.

What is not used warns, once, here: the first :func:`load` (when graphpickle is
imported) names every part whose extension was not built (an install without a
C compiler "succeeds" without them), and a part that is stale or fails to
import warns when it is loaded. Switched off, nothing warns.
:func:`native_parts` says what each part runs.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import Literal

#: What a part runs: ``"active"`` its C extension; otherwise its Python
#: version, because the extension is switched off (``"off"``:
#: ``GRAPHPICKLE_NO_SPEEDUPS``), was not built (``"not built"``), was built
#: from an older C file (``"stale"``), fails to import (``"broken"``), needs
#: the GIL on a free-threaded interpreter running without it (``"needs the GIL"``),
#: or this is not the main interpreter (``"subinterpreter"``).
NativeStatus = Literal[
    "active", "off", "not built", "stale", "broken", "needs the GIL", "subinterpreter"
]

#: Each part with C code: its extension module, and the Python module that
#: loads it (what :func:`native_parts` imports to ask a part not loaded yet).
PARTS: dict[str, tuple[str, str]] = {
    "core": ("graphpickle.core._speedups", "graphpickle.core.native"),
    "wire": ("graphpickle.wire._frames", "graphpickle.wire.frames"),
    "determinism": ("graphpickle.determinism._sets", "graphpickle.determinism.sets"),
    "values": ("graphpickle.determinism._values", "graphpickle.determinism.values"),
}

#: The parts whose extension declares that it does not need the GIL
#: (``Py_MOD_GIL_NOT_USED``, ``_extension.h``); the others keep caches that the
#: GIL guards, and are not imported where the GIL is off.
GIL_FREE = frozenset({"wire", "determinism", "values"})

_status: dict[str, NativeStatus] = {}
_checked_builds = False

HOW_TO_BUILD = (
    "install a C compiler and Python's headers, then reinstall graphpickle as you "
    "installed it, with `--force-reinstall --no-cache-dir` (pip may otherwise reuse "
    "the wheel it built without them), or run `pip install -e .` in a checkout (its "
    "build environment brings the setuptools>=77 that pyproject.toml needs)"
)


def load(
    part: str,
    import_extension: Callable[[], types.ModuleType],
    version: int,
    names: tuple[str, ...],
) -> types.ModuleType | None:
    """The extension of ``part`` (a key of :data:`PARTS`) that
    ``import_extension()`` imports, or ``None`` if it is not built, is turned
    off, is stale (it lacks one of ``names``, or its ``VERSION`` is not
    ``version``: built from an older C file) or fails to import."""
    if part not in PARTS:
        raise ValueError(f"{part!r} is not a part with C code: {', '.join(PARTS)}")
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        _status[part] = "off"
        return None
    if part not in GIL_FREE and gil_is_off():
        _status[part] = "needs the GIL"  # (importing it would turn the GIL back on)
        return None
    if in_subinterpreter():
        _status[part] = "subinterpreter"  # (expected: nothing to rebuild, no warning)
        return None
    _warn_unbuilt_once()
    try:
        module = import_extension()
    except ImportError as exc:
        if not _built(part):
            _status[part] = "not built"  # named by _warn_unbuilt_once
            return None
        _status[part] = "broken"
        warnings.warn(
            f"graphpickle: the compiled extension {PARTS[part][0]} fails to import "
            f"({type(exc).__name__}: {exc}): it is not used and graphpickle runs its Python "
            f"path (the same output, slower). To rebuild it, {HOW_TO_BUILD}.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    found = checked(module, version, names)
    _status[part] = "stale" if found is None else "active"
    return found


def checked(
    module: types.ModuleType, version: int, names: tuple[str, ...]
) -> types.ModuleType | None:
    """``module`` if it has every name in ``names`` and this ``VERSION``, else
    ``None`` with a RuntimeWarning that says how to rebuild it."""
    missing = [name for name in names if not hasattr(module, name)]
    found_version = getattr(module, "VERSION", None)
    if not missing and found_version == version:
        return module
    found = f"missing {', '.join(missing)}" if missing else f"VERSION {found_version!r}"
    warnings.warn(
        f"graphpickle: the compiled extension {module.__file__} is stale ({found}; this "
        f"version needs VERSION {version}): it is not used and graphpickle runs "
        f"its Python path (the same output, slower). To rebuild it, {HOW_TO_BUILD}.",
        RuntimeWarning,
        stacklevel=3,
    )
    return None


def gil_is_off() -> bool:
    """Whether this is a free-threaded interpreter running without the GIL
    (3.13t+, unless ``PYTHON_GIL=1`` turned it on)."""
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_enabled is not None and not is_enabled()


@functools.cache
def in_subinterpreter() -> bool:
    """Whether this is not the main interpreter (3.14's ``concurrent.interpreters``
    and ``InterpreterPoolExecutor``, mod_wsgi): the C parts declare that they
    cannot be loaded there (``Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED``,
    ``_extension.h``), and 3.11, which has no such declaration, keeps them out
    too. Asked of CPython's private interpreters module (``_xxsubinterpreters``
    before 3.13); where it is missing or answers otherwise, this counts as the
    main interpreter, and an extension refused there warns as broken."""
    for name in ("_interpreters", "_xxsubinterpreters"):
        try:
            module = importlib.import_module(name)
            current, main = module.get_current(), module.get_main()
        except Exception:
            continue
        # (3.13+ answer (id, whence); 3.11 and 3.12 an InterpreterID)
        return _interpreter_id(current) != _interpreter_id(main)
    return False


def _interpreter_id(answer: object) -> object:
    return answer[0] if isinstance(answer, tuple) else answer


def native_parts() -> dict[str, NativeStatus]:
    """What each part of graphpickle with C code runs, by part name (``"core"``,
    ``"wire"``, ``"determinism"``, ``"values"``): ``"active"`` (its C extension), or why its
    Python version runs (the same output, slower): ``"off"``
    (``GRAPHPICKLE_NO_SPEEDUPS`` is set), ``"not built"``, ``"stale"`` (built
    from an older C file), ``"broken"`` (it fails to import), ``"needs the
    GIL"`` (a free-threaded interpreter runs without it, and this part's C code
    relies on it: ``"core"``) or ``"subinterpreter"`` (this is not the main
    interpreter, where no C part is loaded). A part not
    loaded yet (``graphpickle.wire`` until it is imported) is loaded first."""
    for part, (_, loader) in PARTS.items():
        if part not in _status:
            importlib.import_module(loader)
    return {part: _status[part] for part in PARTS}


def _built(part: str) -> bool:
    """Whether the extension file of ``part`` is where its package looks for it."""
    *package, name = PARTS[part][0].split(".")[1:]
    directory = os.path.join(os.path.dirname(__file__), *package)
    return any(
        os.path.exists(os.path.join(directory, name + suffix))
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def _warn_unbuilt_once() -> None:
    """At the first load: one RuntimeWarning naming every part not built."""
    global _checked_builds
    if _checked_builds:
        return
    _checked_builds = True
    unbuilt = [part for part in PARTS if not _built(part)]
    if not unbuilt:
        return
    which = f"part {unbuilt[0]} is" if len(unbuilt) == 1 else f"parts {', '.join(unbuilt)} are"
    warnings.warn(
        f"graphpickle: its compiled {which} not built (installing graphpickle builds them "
        "only where a C compiler works): graphpickle runs their Python versions, with the "
        f"same output, slower. To get them, {HOW_TO_BUILD}. graphpickle.native_parts() "
        "says what each part runs; GRAPHPICKLE_NO_SPEEDUPS=1 runs the Python versions "
        "without this warning.",
        RuntimeWarning,
        stacklevel=3,
    )
