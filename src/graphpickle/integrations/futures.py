"""``ProcessPoolExecutor`` that ships calls and results with graphpickle.

A drop-in for :class:`concurrent.futures.ProcessPoolExecutor` (``spawn`` by
default, so workers share nothing with the parent): ``submit(lambda ...)``,
closures and ``__main__`` functions work where the standard executor raises.
Each call travels as one :mod:`graphpickle.wire` message, with its buffers (numpy
arrays) out of band of the pickle; results come back the same way.

Failures reach the caller as clear exceptions, and the pool stays usable:

- an argument that cannot be pickled raises from ``submit`` what pickle would
  (``TypeError: cannot pickle ...``), with its path in a note and in
  ``graphpickle_path`` (``root['args'][1]``); a result that cannot travel back
  raises the same from ``Future.result()``;
- an exception in the task is re-raised by ``Future.result()``, its remote
  traceback attached as ``__cause__``;
- a worker that dies fails its tasks with ``BrokenProcessPool`` naming the
  task, and the next ``submit`` starts a fresh pool.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures as _futures
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import wire

__all__ = ["BrokenProcessPool", "ProcessPoolExecutor"]


class _RemoteTraceback(Exception):
    """The worker's traceback, attached as ``__cause__`` of a re-raised exception."""

    def __str__(self) -> str:
        return str(self.args[0])


def _run(message: bytes) -> bytes:
    """In a worker: load a call, run it, pack its result or its exception."""
    call = wire.unpack_bytes(message)
    return _packed_outcome(lambda: call["fn"](*call["args"], **call["kwargs"]))


def _run_chunk(message: bytes) -> bytes:
    """In a worker: ``map``'s chunk of calls, one message for the whole chunk."""
    call = wire.unpack_bytes(message)
    fn = call["fn"]
    return _packed_outcome(lambda: [fn(*args) for args in call["chunk"]])


def _packed_outcome(compute: Callable[[], Any]) -> bytes:
    outcome: tuple[Any, ...]
    try:
        outcome = ("ok", compute())
    except BaseException as exc:  # as the standard executor: the caller decides
        outcome = ("raised", exc, traceback.format_exc())
    try:
        return wire.pack_bytes(outcome)
    except Exception as exc:  # a result or an exception that cannot travel
        return wire.pack_bytes(("raised", exc, traceback.format_exc()))


class _Future(_futures.Future[Any]):
    """The caller's future; cancelling it cancels the call in the pool."""

    def __init__(self) -> None:
        super().__init__()
        self.inner: _futures.Future[bytes] | None = None

    def cancel(self) -> bool:
        if self.inner is not None and not self.inner.cancel():
            return False
        return super().cancel()


class ProcessPoolExecutor(_futures.Executor):
    """A process pool whose calls and results travel with graphpickle."""

    def __init__(
        self,
        max_workers: int | None = None,
        mp_context: Any = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        *,
        max_tasks_per_child: int | None = None,
    ) -> None:
        context = mp_context or multiprocessing.get_context("spawn")

        def new_pool() -> _futures.ProcessPoolExecutor:
            return _futures.ProcessPoolExecutor(
                max_workers,
                context,
                initializer,
                initargs,
                max_tasks_per_child=max_tasks_per_child,
            )

        self._new_pool = new_pool
        self._lock = threading.Lock()
        self._pool = new_pool()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> _futures.Future[Any]:
        message = wire.pack_bytes({"fn": fn, "args": args, "kwargs": kwargs})
        return self._submit(_run, message, _describe(fn))

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[Any]:
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        end = None if timeout is None else time.monotonic() + timeout
        calls = zip(*iterables, strict=False)
        submitted = [
            self._submit(_run_chunk, wire.pack_bytes({"fn": fn, "chunk": chunk}), _describe(fn))
            for chunk in iter(lambda: list(itertools.islice(calls, chunksize)), [])
        ]

        def results() -> Iterator[Any]:
            try:
                for future in submitted:
                    left = None if end is None else end - time.monotonic()
                    yield from future.result(left)
            finally:
                for future in submitted:
                    future.cancel()

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            pool = self._pool
        pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    def _submit(
        self, run: Callable[[bytes], bytes], message: bytes, what: str
    ) -> _futures.Future[Any]:
        outer = _Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            try:
                inner = self._pool.submit(run, message)
            except BrokenProcessPool:  # a worker died earlier: start afresh
                self._pool.shutdown(wait=False)
                self._pool = self._new_pool()
                inner = self._pool.submit(run, message)
        outer.inner = inner
        inner.add_done_callback(lambda done: _settle(outer, done, what))
        return outer


def _settle(outer: _Future, inner: _futures.Future[bytes], what: str) -> None:
    if inner.cancelled():
        outer.cancel()
        return
    error = inner.exception()
    if error is not None:
        if isinstance(error, BrokenProcessPool):
            error = BrokenProcessPool(
                f"a worker process died while running {what} (killed, or it crashed); "
                "the pool starts new workers for the next submit"
            )
        outer.set_exception(error)
        return
    try:
        outcome = wire.unpack_bytes(inner.result())
    except Exception as exc:  # a result this process cannot load
        outer.set_exception(exc)
        return
    if outcome[0] == "ok":
        outer.set_result(outcome[1])
    else:
        _, raised, remote = outcome
        raised.__cause__ = _RemoteTraceback(f'\n"""\n{remote}"""')
        outer.set_exception(raised)


def _describe(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{getattr(fn, '__module__', None) or '?'}.{name}"
