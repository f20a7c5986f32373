"""What graphpickle's ``InterpreterPoolExecutor`` runs inside each interpreter.

CPython shares a call's function and arguments with an interpreter through its own
``pickle`` (``Python/crossinterp.c``), with no hook for another pickler. So the
executor sends a call as graphpickle payload bytes (which any interpreter can
share) to :func:`call`, an importable function that loads it, runs it and returns
the result as graphpickle bytes. The interpreter imports this module, and so
graphpickle, at its first call; graphpickle's C parts do not load in a
subinterpreter, and its Python versions run there (``docs/development.md``).
"""

from __future__ import annotations

import pickle
import re
import sys
import traceback
from typing import Any

from ..core.pickler import dumps
from ._main_namespace import loads_sharing_main

# CPython's words for an extension module that refuses subinterpreters
# (Python/import.c); numpy's, among others, today.
_NOT_IN_SUBINTERPRETERS = re.compile(r"module (\S+) does not support loading in subinterpreters")


def call(results: Any, payload: bytes) -> bytes:
    """In the interpreter: load the call, run it, return its result pickled.

    An exception goes to ``results`` (pickled, or ``None`` if it cannot be) and is
    raised again, so that CPython sends its traceback along as the stock executor's
    ``do_call`` does.
    """
    try:
        # The parent's own bytes; its __main__ functions run in this interpreter's.
        fn, args, kwargs = loads_sharing_main(lambda: pickle.loads(payload))
        return dumps(fn(*args, **kwargs))
    except BaseException as exc:
        refused = _NOT_IN_SUBINTERPRETERS.search(str(exc))
        if isinstance(exc, ImportError) and refused:
            module = refused.group(1)
            exc.add_note(
                f"graphpickle: {module.partition('.')[0]} cannot be imported in a "
                f"subinterpreter (its extension module {module} does not support them), so "
                "a call that needs it cannot run in an InterpreterPoolExecutor; use "
                "graphpickle.integrations.futures.ProcessPoolExecutor"
            )
        try:
            packed: bytes | None = dumps(exc)
        except Exception:
            print("exception cannot be pickled:", file=sys.stderr)
            traceback.print_exception(exc)
            packed = None
        results.put(packed)
        raise
