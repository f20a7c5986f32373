"""dask's ``tokenize`` on deterministic payloads: the same notebook code gives the
same keys in every process.

dask names tasks and collections by ``tokenize``. For an object it cannot name
otherwise (functions, classes, instances without ``__dask_tokenize__``) it calls
``_normalize_pickle`` (in ``dask.tokenize``, or ``dask.base`` before dask
2024.12), which runs ``pickle.dumps``, a scan for
``b"__main__"``, ``cloudpickle.dumps`` and a ``pickle.loads``, up to three times,
until two hashes agree. Its tokens of ``__main__`` classes and of their
instances differ in every process (cloudpickle draws a random id for each
dynamic class), and those of ``__main__`` functions change with the script's
directory, so a notebook computes other keys in every kernel.

:func:`install` replaces that one function: an object that plain pickle writes
by reference, with nothing of ``__main__``, is hashed from that payload (dask's
own first step, without the ``loads`` and the repeats); anything else from one
deterministic graphpickle payload and its out-of-band buffers: the payload of
:func:`graphpickle.dumps` with ``deterministic=True``, with class ids left out
(:func:`graphpickle.determinism.content_dumps`: an id hashes what the payload
holds anyway, and computing it costs a pass over each class), and the first
lines of the code it writes. Deterministic payloads write line 1, so that moving
a function leaves its payload alone; dask's tokens change when a function is
defined again at another line, and so do these. An object whose
deterministic payload cannot be made gets dask's own treatment, including its
``tokenize.ensure-deterministic`` error::

    import graphpickle.integrations.dask_tokenize
    graphpickle.integrations.dask_tokenize.install()     # in every process that builds graphs

It needs dask only (no distributed). :func:`uninstall` restores dask's function.
"""

from __future__ import annotations

import pickle
from types import FunctionType
from typing import Any

from ..core.fingerprint import content_dumps

__all__ = ["install", "installed", "uninstall"]

_MAIN_NAMES = frozenset({"__main__", "__mp_main__"})  # (__mp_main__: a spawned child's)
_original: Any = None
_hash_buffer_hex: Any = None


def _normalize_pickle(o: object) -> tuple[Any, ...]:
    """What ``dask.tokenize._normalize_pickle(o)`` returns: a hash of the payload
    and one of each out-of-band buffer."""
    global _hash_buffer_hex
    if _hash_buffer_hex is None:
        from dask.hashing import hash_buffer_hex

        _hash_buffer_hex = hash_buffer_hex
    buffers: list[pickle.PickleBuffer] = []
    data = None
    # A function or class of the main script: plain pickle would name __main__
    # (or fail), so it is not asked.
    if not ((type(o) is FunctionType or type(o) is type) and o.__module__ in _MAIN_NAMES):
        try:
            data = pickle.dumps(o, protocol=5, buffer_callback=buffers.append)
        except Exception:
            data = None
    if data is None or b"__main__" in data or b"__mp_main__" in data:
        buffers.clear()
        code_lines: dict[int, int] = {}
        try:
            data = content_dumps(o, buffers.append, code_lines)
        except Exception:
            return _original(o)  # type: ignore[no-any-return]
        # dask's tokens change when a function is defined again at another line
        # (cloudpickle writes the line): deterministic payloads write line 1, so
        # the lines come beside them, in an order that depends on them only.
        lines = sorted(code_lines.values())
        return _hash_buffer_hex(data), [_hash_buffer_hex(buffer) for buffer in buffers], lines
    return _hash_buffer_hex(data), [_hash_buffer_hex(buffer) for buffer in buffers]


def _tokenize_module() -> Any:
    """Where dask keeps ``_normalize_pickle``: ``dask.tokenize`` (2024.12 on), or
    ``dask.base`` before."""
    import importlib

    try:
        module = importlib.import_module("dask.tokenize")
    except ImportError:
        module = importlib.import_module("dask.base")
    if not hasattr(module, "_normalize_pickle"):
        raise ImportError(f"this dask ({module.__name__}) has no _normalize_pickle to replace")
    return module


def install() -> None:
    """Make dask's ``tokenize`` hash what dask pickles from deterministic
    payloads, in this process."""
    global _original
    module = _tokenize_module()
    if module._normalize_pickle is not _normalize_pickle:
        _original = module._normalize_pickle
        module._normalize_pickle = _normalize_pickle


def uninstall() -> None:
    """Undo :func:`install`."""
    module = _tokenize_module()
    if module._normalize_pickle is _normalize_pickle:
        module._normalize_pickle = _original


def installed() -> bool:
    """Whether this process tokenizes with graphpickle."""
    return _tokenize_module()._normalize_pickle is _normalize_pickle
