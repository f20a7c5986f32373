"""Compiled extensions: found, checked, or ``None``.

Each part of graphpickle that has C code keeps it beside the Python it
accelerates (``core/_speedups.c``, ``wire/_frames.c``,
``determinism/_sets.c``) and loads it with :func:`load`. The Python versions
give the same output and run when an extension is not built, is turned off
(``GRAPHPICKLE_NO_SPEEDUPS``) or is stale.
"""

from __future__ import annotations

import os
import types
import warnings
from collections.abc import Callable


def load(
    import_extension: Callable[[], types.ModuleType], version: int, names: tuple[str, ...]
) -> types.ModuleType | None:
    """The extension ``import_extension()`` imports, or ``None`` if it is not
    built, is turned off, or is stale (it lacks one of ``names``, or its
    ``VERSION`` is not ``version``: built from an older C file)."""
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        return None
    try:
        module = import_extension()
    except ImportError:
        return None
    return checked(module, version, names)


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
        "its Python path (the same output, slower). Rebuild it with "
        "`pip install --no-build-isolation -e .` or reinstall graphpickle.",
        RuntimeWarning,
        stacklevel=3,
    )
    return None
