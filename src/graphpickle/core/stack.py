"""Keep deep graphs from overflowing the C stack (Python 3.11).

Up to Python 3.11 the C pickler recurses once per nesting level and stops at
Python's recursion limit. At the default limit (1000) the C stack is never at
risk, but programs that raise the limit (``sys.setrecursionlimit(10**6)`` is
common advice for deep graphs) let the C pickler, and the pure-Python pickler
on objects, run past the end of the thread's stack: the process dies with a
segmentation fault, with plain ``pickle`` as well.

When the limit is above what a default 8 MiB stack can hold, graphpickle runs
the pickling in a helper thread whose stack is sized for the limit, so a
too-deep graph ends in a ``RecursionError`` (reported as a PicklingError), and
a deep but legal one pickles. Programs that keep the default limit never pay
for the thread.

From Python 3.12 on, C code counts its own recursion against a limit fixed
when the interpreter is built (``Py_C_RECURSION_LIMIT``: 1500 on 3.12, 10000
on 3.13, for release builds on Linux), which ``sys.setrecursionlimit()`` does
not change, and Python-to-Python calls use no C stack. A raised limit can then
no longer run the C stack out, the C pickler stops at the same depth on any
thread (about 750 nested lists or 500 nested objects on 3.12, 5000 and 3333
on 3.13), and :func:`needs_deep_stack` is always false: a helper thread would
change nothing but cost ~100 us per dump and reserve a stack sized for the
limit (1 GiB at ``10**6``, which fails under a tight ``ulimit -v``).
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Measured on CPython 3.11 x86-64: 170-480 bytes of C stack per recursion level
# of the C pickler, depending on what the level holds. Twice the worst case:
_STACK_BYTES_PER_LEVEL = 1024
_DEFAULT_STACK_BYTES = 8 * 1024 * 1024
SAFE_RECURSION_LIMIT = _DEFAULT_STACK_BYTES // _STACK_BYTES_PER_LEVEL // 2
_MAX_STACK_BYTES = 1 << 32
_stack_size_lock = threading.Lock()


# Python 3.12+ bounds C recursion by its own limit (see the module docstring).
_C_STACK_FOLLOWS_RECURSION_LIMIT = sys.version_info < (3, 12)
#: A recursion limit above this needs the deep stack (0: no limit does), for
#: callers that check in C (``_speedups.Dumper``).
DEEP_STACK_ABOVE = SAFE_RECURSION_LIMIT if _C_STACK_FOLLOWS_RECURSION_LIMIT else 0


def needs_deep_stack() -> bool:
    """Whether pickling must run on :func:`run_on_deep_stack`: on Python 3.11,
    when the recursion limit is above what a default stack holds."""
    return _C_STACK_FOLLOWS_RECURSION_LIMIT and sys.getrecursionlimit() > SAFE_RECURSION_LIMIT


def run_on_deep_stack(func: Callable[[], T]) -> T:
    """Call ``func`` on a new thread whose C stack fits Python's recursion limit
    (callers skip this unless :func:`needs_deep_stack`)."""
    limit = sys.getrecursionlimit()
    size = min(_MAX_STACK_BYTES, (limit * _STACK_BYTES_PER_LEVEL + (1 << 20)) & ~0xFFFF)
    outcome: list[T] = []
    failure: list[BaseException] = []
    context = contextvars.copy_context()  # the caller's settings (explain's quiet mode)

    def target() -> None:
        try:
            outcome.append(context.run(func))
        except BaseException as exc:
            failure.append(exc)

    with _stack_size_lock:  # stack_size() is process-wide: set it only around start()
        previous = threading.stack_size(size)
        try:
            worker = threading.Thread(target=target, name="graphpickle-deep-stack")
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    if failure:
        raise failure[0]
    return outcome[0]
