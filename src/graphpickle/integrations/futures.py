"""Executors that ship calls and results with graphpickle.

``ProcessPoolExecutor``: a drop-in for :class:`concurrent.futures.ProcessPoolExecutor`
(``spawn`` by default, so workers share nothing with the parent): ``submit(lambda
...)``, closures and ``__main__`` functions work where the standard executor raises.
Each call travels as one :mod:`graphpickle.wire` message, with its buffers (numpy
arrays) out of band of the pickle; results come back the same way. The initializer
travels by value too. Under ``spawn`` and ``forkserver`` the workers do not run the
main script again, as the standard library's do (``_process_start``): a script needs
no ``if __name__ == "__main__":`` guard for them, and one read from stdin works.
The ``__main__`` functions a worker loads share one namespace, the worker's
``__main__``, as under fork (``_main_namespace``): a global the initializer sets is
what the tasks read.

Failures reach the caller as clear exceptions, and the pool stays usable:

- an argument that cannot be pickled raises from ``submit`` what pickle would
  (``TypeError: cannot pickle ...``), with its path in a note and in
  ``graphpickle_path`` (``root['args'][1]``); a result that cannot travel back
  raises the same from ``Future.result()``;
- an exception in the task is re-raised by ``Future.result()``, its remote
  traceback attached as ``__cause__``;
- a worker that dies fails its tasks with ``BrokenProcessPool`` naming the
  task, and the next ``submit`` starts a fresh pool;
- a worker that fails at start (its initializer cannot be loaded or raises, or
  multiprocessing's own start fails) fails the tasks with a ``BrokenProcessPool``
  that says which, whose ``__cause__`` is the worker's own exception (with its
  traceback) and whose note repeats it; the standard executor says only that a
  process "terminated abruptly".

``InterpreterPoolExecutor`` (Python 3.14+): a drop-in for
:class:`concurrent.futures.InterpreterPoolExecutor`, whose calls travel to each
interpreter as graphpickle bytes (``_in_interpreter``), its ``__main__`` functions
sharing the interpreter's ``__main__``. Before 3.14 the name exists
and raises ``RuntimeError`` when called.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures as _futures
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import wire
from ..core.pickler import loads
from . import _main_namespace
from ._main_namespace import MainPickler, loads_sharing_main

__all__ = ["BrokenProcessPool", "InterpreterPoolExecutor", "ProcessPoolExecutor"]


class _RemoteTraceback(Exception):
    """The worker's traceback, attached as ``__cause__`` of a re-raised exception."""

    def __str__(self) -> str:
        return str(self.args[0])


def _pack(obj: Any) -> bytes:
    """A call (or the initializer) for the workers: its ``__main__`` functions run
    in the worker's ``__main__``, one namespace per worker as under fork."""
    return wire.pack_bytes(obj, pickler_class=MainPickler)


def _unpack(message: bytes) -> Any:
    """In a worker: a message of :func:`_pack`."""
    return loads_sharing_main(lambda: wire.unpack_bytes(message))


def _run(message: bytes) -> bytes:
    """In a worker: load a call, run it, pack its result or its exception."""
    call = _unpack(message)
    return _packed_outcome(lambda: call["fn"](*call["args"], **call["kwargs"]))


def _run_chunk(message: bytes) -> bytes:
    """In a worker: ``map``'s chunk of calls, one message for the whole chunk."""
    call = _unpack(message)
    fn = call["fn"]
    return _packed_outcome(lambda: [fn(*args) for args in call["chunk"]])


# What the workers of one pool report, in shared memory: whether any got past
# its start, and whether the initializer failed (how: _FAILURES). One byte each,
# written, never read-modified-written.
_STARTED, _INITIALIZER_FAILED = 0, 1
_NOT_LOADED, _RAISED = 1, 2
_FAILURES = {
    _NOT_LOADED: "the pool's initializer could not be loaded in a worker process",
    _RAISED: "the pool's initializer raised in a worker process",
}


def _start_worker(state: Any, fork_report_fd: int, initializer: bytes | None) -> None:
    """In a worker, first thing once it is started: say so, then load and run the
    user's initializer (and send the parent its error, if it raises)."""
    state[_STARTED] = 1
    if initializer is None:
        return
    failure = _NOT_LOADED
    try:
        function, args = _unpack(initializer)
        failure = _RAISED
        function(*args)
    except BaseException as exc:
        state[_INITIALIZER_FAILED] = failure
        from . import _process_start

        # A spawn or forkserver worker got the pool's pipe as it started; a fork
        # worker has the parent's.
        report_fd = _process_start.worker_report_fd()
        if report_fd is None and fork_report_fd >= 0:
            report_fd = fork_report_fd
        if report_fd is not None:
            _process_start.send_report(report_fd, exc)
        raise


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
        # Workers do not run the main script, so the initializer travels by value
        # like any call (a __main__ function, a lambda): packed here, where an error
        # can name its path.
        packed = None if initializer is None else _pack((initializer, initargs))

        def new_pool() -> tuple[_futures.ProcessPoolExecutor, _PoolState]:
            state = _PoolState(context)
            pool = _futures.ProcessPoolExecutor(
                max_workers,
                state.worker_context,
                _start_worker,
                (state.flags, state.fork_report_fd, packed),
                max_tasks_per_child=max_tasks_per_child,
            )
            return pool, state

        self._new_pool = new_pool
        self._lock = threading.Lock()
        self._pool, self._state = new_pool()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> _futures.Future[Any]:
        message = _pack({"fn": fn, "args": args, "kwargs": kwargs})
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
            self._submit(_run_chunk, _pack({"fn": fn, "chunk": chunk}), _describe(fn))
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
                self._pool, self._state = self._new_pool()
                inner = self._pool.submit(run, message)
            except (ConnectionError, EOFError) as exc:
                # Starting a worker failed (3.14's forkserver dies importing a main
                # module that starts a pool): the error stays, with what it means.
                if not self._state.flags[_STARTED]:
                    exc.add_note(self._state.why_no_worker_started())
                raise
            state = self._state
        outer.inner = inner
        inner.add_done_callback(lambda done: _settle(outer, done, what, state))
        return outer


class _PoolState:
    """What the workers of one pool report (see :func:`_start_worker`), and the
    context that starts them."""

    def __init__(self, context: Any) -> None:
        self.flags = context.RawArray("B", 2)
        self.start_method = context.get_start_method()
        self.worker_context = context
        self.fork_report_fd = -1
        self.reports: Any = None
        if os.name == "posix":
            from . import _process_start

            self.reports = _process_start.Reports()
            if _process_start.wraps(context):
                _process_start.check(self.start_method)
                self.worker_context = _process_start.WorkerContext(context, self.reports)
            elif self.start_method == "fork":
                self.fork_report_fd = self.reports.write_fd
        if self.start_method == "fork":
            # A fork worker's __main__ (which its calls' functions share) holds the
            # parent's classes: they must load as those (see _main_namespace).
            _main_namespace.track_main_classes_before_forks()

    def broken(self, what: str) -> BrokenProcessPool:
        """The error for tasks of a pool that broke, in words, with the worker's own
        error as its cause when the worker could send it."""
        reports = [] if self.reports is None else self.reports.received()
        if self.flags[_INITIALIZER_FAILED]:
            error = BrokenProcessPool(
                f"{_FAILURES[self.flags[_INITIALIZER_FAILED]]}, so {what} could not run"
            )
        elif reports:
            error = BrokenProcessPool(f"a worker process failed to start, so {what} could not run")
        elif self.flags[_STARTED]:
            return BrokenProcessPool(
                f"a worker process died while running {what} (killed, or it crashed); "
                "the pool starts new workers for the next submit"
            )
        else:
            error = BrokenProcessPool(
                f"no worker process could start to run {what}: each died before it ran "
                "anything, and none sent an error (killed?)"
            )
        if not reports:  # a context graphpickle does not start workers for
            return error
        raised, text = reports[0]
        if raised is None:
            summary = (text.rstrip().splitlines() or ["(no text)"])[-1]
        else:
            summary = traceback.format_exception_only(raised)[0].strip()
        error.add_note(f"graphpickle: the worker's error: {summary}")
        remote = _RemoteTraceback(f'\n"""\n{text}"""')
        if raised is None:
            error.__cause__ = remote
        else:
            raised.__cause__ = remote
            error.__cause__ = raised
        return error

    def why_no_worker_started(self) -> str:
        server = "graphpickle's fork server" if self.start_method == "forkserver" else "it"
        return (
            f"graphpickle: starting a worker process ({self.start_method!r}) failed: "
            f"{server} died before the worker could start (its error went to stderr)"
        )


def _settle(outer: _Future, inner: _futures.Future[bytes], what: str, state: _PoolState) -> None:
    if inner.cancelled():
        outer.cancel()
        return
    error = inner.exception()
    if error is not None:
        if isinstance(error, BrokenProcessPool):
            error = state.broken(what)
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


def _pack_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """A call for an interpreter, pickled in the caller's thread: an object that
    cannot be pickled raises here, its path in a note. Its ``__main__`` functions
    run in the interpreter's ``__main__``, one namespace per interpreter."""
    return _main_namespace.dumps((fn, args, kwargs))


if sys.version_info >= (3, 14):
    from concurrent import interpreters as _interpreters
    from concurrent.futures import interpreter as _interpreter

    from . import _in_interpreter

    class _InterpreterContext(_interpreter.WorkerContext):
        """The stock worker context, each call run by ``_in_interpreter.call``."""

        @classmethod
        def prepare(
            cls, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
        ) -> tuple[Callable[[], _InterpreterContext], Callable[..., bytes]]:
            initdata = None if initializer is None else _pack_call(initializer, initargs, {})

            def create_context() -> _InterpreterContext:
                return cls(initdata)

            def resolve_task(fn: Any, args: tuple[bytes], kwargs: dict[str, Any]) -> bytes:
                return args[0]  # submit() packed the call, outside the executor's locks

            return create_context, resolve_task

        def run(self, task: bytes) -> Any:
            try:
                result = self.interp.call(_in_interpreter.call, self.results, task)
            except _interpreters.ExecutionFailed as wrapper:
                # As the stock context: the exception itself, caused by CPython's
                # report of it (with the interpreter's traceback).
                try:
                    packed = self.results.get_nowait()
                except _interpreters.QueueEmpty:
                    raise wrapper from None  # _in_interpreter did not run: the report says why
                if packed is None:  # an exception pickle cannot take
                    raise
                raise loads(packed) from wrapper
            return loads(result)

    class InterpreterPoolExecutor(_interpreter.InterpreterPoolExecutor):
        """A drop-in for :class:`concurrent.futures.InterpreterPoolExecutor` whose
        calls (lambdas, closures, ``__main__`` functions and classes) travel with
        graphpickle."""

        @classmethod
        def prepare_context(
            cls, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
        ) -> tuple[Callable[[], _InterpreterContext], Callable[..., bytes]]:
            return _InterpreterContext.prepare(initializer, initargs)

        def submit(
            self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
        ) -> _futures.Future[Any]:
            return super().submit(_in_interpreter.call, _pack_call(fn, args, kwargs))

else:

    class InterpreterPoolExecutor(_futures.Executor):
        """Needs Python 3.14 or later (``concurrent.futures.InterpreterPoolExecutor``)."""

        def __init__(
            self,
            max_workers: int | None = None,
            thread_name_prefix: str = "",
            initializer: Callable[..., object] | None = None,
            initargs: tuple[Any, ...] = (),
        ) -> None:
            raise RuntimeError(
                "graphpickle.integrations.futures.InterpreterPoolExecutor needs Python 3.14 or "
                f"later (concurrent.futures.InterpreterPoolExecutor is new in 3.14); this is "
                f"{sys.version.split()[0]}. graphpickle.integrations.futures.ProcessPoolExecutor "
                "works on every Python."
            )
