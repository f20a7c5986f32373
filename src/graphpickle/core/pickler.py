"""The pickler and the ``dump``/``dumps``/``load``/``loads`` functions.

graphpickle's ``Pickler`` is the C pickler (``_pickle.Pickler``) with one hook,
``reducer_override``. The C pickler handles atoms, strings, bytes and builtin
containers itself and never calls the hook for them; every other object costs
one dict lookup on its type. Functions and classes that the receiver can import
fall through to the C pickler unchanged, so when nothing needs pickling by
value the output is byte for byte what ``pickle.dumps`` writes. Only the
objects that cannot be imported are reduced by value (through cloudpickle), in
the same single pass.
"""

from __future__ import annotations

import _pickle
import contextlib
import functools
import io
import pickle
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import IO, Any, NoReturn, TypeVar, cast

from .. import determinism
from .._switches import CACHING
from ..determinism.canonical import DeterministicState
from ..errors import UnpicklingError
from ..restricted.unpickler import AllowList, compile_allowed, restricted_load
from . import connection as _connection
from .captures import no_capture_warnings
from .classes_first import ClassesFirst
from .classes_first import restart as restart_classes_first
from .locate import pickling_error
from .native import speedups as _speedups  # tests set it to None: the Python hook
from .overrun import refuse_overrun
from .reducers import (
    MAX_SHARED_TYPES,
    PicklerState,
    Reducer,
    ReducerLookup,
    TypeDispatch,
    dispatch_for,
    on_tables_changed,
)
from .stack import DEEP_STACK_ABOVE, needs_deep_stack, run_on_deep_stack

__all__ = ["DEFAULT_PROTOCOL", "CloudPickler", "Pickler", "dump", "dumps", "load", "loads"]

DEFAULT_PROTOCOL = pickle.HIGHEST_PROTOCOL  # as cloudpickle's (5 on every Python we support)


BufferCallback = Callable[[pickle.PickleBuffer], Any]


class Pickler(_pickle.Pickler):
    """Write pickles that load where the sender's ``__main__``, lambdas, closures
    and by-value modules are unavailable.

    A drop-in for ``pickle.Pickler``: subclass it, set ``dispatch_table`` or
    ``persistent_id``, or override ``reducer_override`` (call
    ``super().reducer_override(obj)`` for what it does not handle).

    ``reducers`` maps classes to reducers for this pickler only; they take
    precedence over :func:`graphpickle.register_reducer`'s global table and
    never leak into other picklers. ``reducer_lookup(cls)`` is asked, once per
    type (the answer is remembered for picklers given the same function), for a
    reducer for types neither table names (another library's registry, as
    dask's ``dask_serialize``); ``None`` means the default.

    ``deterministic=True`` makes equal objects give equal bytes in any process
    (see :mod:`graphpickle.determinism`): it needs protocol 4 or 5, each
    ``dump()`` starts from an empty memo, and every buffer handed to
    ``buffer_callback`` goes out of band (its return value is not consulted).

    ``code_blocks`` is for engine integrations: while that context variable is
    true, remembered by-value functions and code objects travel as code blocks
    (:mod:`graphpickle.core.blocks`), which only a receiver with graphpickle
    loads; set it only for a receiver that said it does.
    """

    # Set on deterministic picklers only (a class default: one assignment fewer
    # when creating the others, which dumps() does on every call).
    _passes: determinism.Passes | None = None
    # Whether a class after this one in the MRO defines reducer_override (a
    # mixin: class P(graphpickle.Pickler, Hooks)); decided once per class.
    _override_follows = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._override_follows = getattr(super(), "reducer_override", None) is not None

    def __init__(
        self,
        file: IO[bytes],
        protocol: int | None = None,
        buffer_callback: BufferCallback | None = None,
        *,
        reducers: Mapping[type, Reducer] | None = None,
        reducer_lookup: ReducerLookup | None = None,
        deterministic: bool = False,
        code_blocks: ContextVar[Any] | None = None,
    ) -> None:
        if protocol is None:
            protocol = DEFAULT_PROTOCOL
        elif protocol < 0:
            protocol = pickle.HIGHEST_PROTOCOL
        canonical: DeterministicState | None = None
        if deterministic:
            # Each pass writes to memory; dump() passes the final one on.
            self._passes, canonical = determinism.prepare(
                file,
                protocol,
                buffer_callback,
                reducers,
                reducer_lookup,
                pickler_class=Pickler,
                quietly=no_capture_warnings,
            )
            file, buffer_callback = self._passes.pass_output, self._passes.pass_callback
        super().__init__(file, protocol, buffer_callback=buffer_callback)
        self.protocol: int = protocol
        self._state = PicklerState(protocol, canonical, None if deterministic else code_blocks)
        dispatch = dispatch_for(reducers, reducer_lookup)
        # With a mixin's reducer_override to call on, the Python method below
        # runs: it passes the mixin what graphpickle leaves to pickle.
        if (
            _speedups is not None
            and type(self).reducer_override is Pickler.reducer_override
            and not self._override_follows
        ):
            # The C pickler looks reducer_override up on the instance at each
            # dump(): this puts the C version of the method below in its place.
            self.reducer_override = _speedups.Dispatch(  # type: ignore[method-assign]
                dispatch.handlers, dispatch.resolve, self._state
            )
        else:  # what the Python version reads
            self._handlers = dispatch.handlers
            self._resolve = dispatch.resolve

    @property
    def pickled_by_value(self) -> bool:
        """Whether anything dumped so far was pickled by value (code, classes):
        such payloads load only on the same Python minor version."""
        return self._state.by_value

    def reducer_override(self, obj: Any) -> Any:
        # The hot path: called for every object that is not an atom, a str,
        # bytes or a builtin container. Keep it to one lookup. _speedups.c
        # does the same in C; keep the two in step.
        cls = type(obj)
        handler: Any
        try:
            handler = self._handlers[cls]
        except KeyError:
            handler = self._resolve(cls)
        else:
            if type(handler) is tuple:  # resolved: used while what it read is the same
                handler = handler[0] if TypeDispatch.still(handler, cls) else self._resolve(cls)
        if handler is not None:
            reduction = handler(self._state, obj)
            if reduction is not NotImplemented:
                return reduction
        if self._override_follows:  # the next reducer_override in the MRO, as super() gives it
            return super().reducer_override(obj)
        return NotImplemented

    def dump(self, obj: Any) -> None:
        """Write the pickle of ``obj``.

        If an object's reduction raises, that exception propagates as pickle's
        would, with notes naming the object's type and its path in ``obj`` (and
        ``graphpickle_path``/``graphpickle_type_name`` attributes); graphpickle's
        own refusals, and graphs too deep to pickle, raise
        :class:`graphpickle.PicklingError`."""
        if self._passes is not None and self.fast:
            raise ValueError("deterministic payloads need the pickler's memo: turn fast mode off")
        # A deterministic dump's passes (some in pure Python) run where this
        # decides, so the stack is chosen once for all of them.
        run = _pickle.Pickler.dump if self._passes is None else determinism.dump
        try:
            if needs_deep_stack():
                run_on_deep_stack(lambda: run(self, obj))
            else:
                run(self, obj)
        except (OSError, MemoryError):
            raise  # trouble with the output, not with the object
        except Exception as exc:
            _dump_failed(self, obj, exc)

    def _dump_raw(self, obj: Any) -> None:
        """One run of the C pickler over ``obj``: a pass of a deterministic dump,
        already on the stack ``dump()`` chose."""
        super().dump(obj)


def _dump_failed(pickler: Pickler, obj: Any, exc: Exception) -> NoReturn:
    """Raise what a failed ``pickler.dump(obj)`` raises: ``exc`` located, or
    graphpickle's own error chained to it."""
    # The exception's traceback holds the pickler, so it may be freed by the
    # cycle collector, in an order that crashes CPython when its memo holds
    # memoryviews (3.11). Nothing written after a failure is usable.
    pickler.clear_memo()
    # (A subclass whose __init__ never called ours has no state: CPython's own
    # test_bad_init expects pickle's PicklingError from it.)
    state = getattr(pickler, "_state", None)
    if state is not None:
        state.sink = None  # the search writes its classes inline: no ClassesFirst
    error = pickling_error(pickler, obj, exc)  # (which pickles parts of obj again)
    # The blocks this dump (and that search) carried for a connection were not sent.
    if state is not None:
        _connection.dump_failed(state.blocks)
    if error is exc:
        raise exc  # its own type and traceback, with notes saying where
    raise error from exc


#: cloudpickle's other name for its pickler, for ``import graphpickle as cloudpickle``.
CloudPickler = Pickler


def dump(
    obj: Any,
    file: IO[bytes],
    protocol: int | None = None,
    buffer_callback: BufferCallback | None = None,
    *,
    deterministic: bool = False,
) -> None:
    """Write the pickle of ``obj`` to the binary file ``file``."""
    Pickler(file, protocol, buffer_callback=buffer_callback, deterministic=deterministic).dump(obj)


def dumps(
    obj: Any,
    protocol: int | None = None,
    buffer_callback: BufferCallback | None = None,
    *,
    deterministic: bool = False,
) -> bytes:
    """Return the pickle of ``obj`` as bytes (protocol 5 by default).

    With protocol 5 and a ``buffer_callback``, buffers (numpy arrays,
    ``PickleBuffer``, ``memoryview``) are handed to the callback instead of being
    copied into the payload, as with ``pickle.dumps``.

    With ``deterministic=True``, equal objects give equal bytes in any process,
    under any ``PYTHONHASHSEED`` (see :mod:`graphpickle.determinism`).
    """
    out = io.BytesIO()
    Pickler(out, protocol, buffer_callback=buffer_callback, deterministic=deterministic).dump(obj)
    return out.getvalue()


def loads(
    data: bytes | bytearray | memoryview,
    /,
    *,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    errors: str = "strict",
    buffers: Iterable[Any] | None = None,
    allowed: Iterable[str] | None = None,
) -> Any:
    """Load a pickle from bytes: ``pickle.loads``, with the same arguments.
    ``buffers`` supplies, in order, the out-of-band buffers that ``dumps``
    handed to its ``buffer_callback``.

    Bad input raises what ``pickle.loads`` raises (``EOFError`` for empty or
    truncated data, ``pickle.UnpicklingError``, ``ImportError`` for a missing
    module, ...), with a note that says what is wrong in words.

    With ``allowed`` (for example :data:`graphpickle.DATA_ONLY`), only the globals
    the allow-list names are imported; any other raises
    :class:`graphpickle.ForbiddenGlobalError` before it is imported. Untrusted
    bytes then fail with one family: every failure is a
    :class:`graphpickle.UnpicklingError` (a refusal, a budget, malformed data,
    or what an allowed constructor raised, chained as ``__cause__``), but
    ``EOFError`` for data that ends before a pickle starts, as with pickle.
    """
    allow_list = None if allowed is None else compile_allowed(allowed)
    try:
        return load_bytes(data, allow_list, buffers, fix_imports, encoding, errors)
    except UnpicklingError as exc:
        if allow_list is None:
            _loads_failed(exc, data)
        raise  # restricted loading's own errors say what and where
    except Exception as exc:
        _loads_failed(exc, data)


def load(
    file: IO[bytes],
    *,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    errors: str = "strict",
    buffers: Iterable[Any] | None = None,
    allowed: Iterable[str] | None = None,
) -> Any:
    """Load one pickle from the binary file ``file``: ``pickle.load``, with the
    same arguments and errors (and ``allowed`` as in :func:`loads`)."""
    allow_list = None if allowed is None else compile_allowed(allowed)
    try:
        if allow_list is not None:
            return restricted_load(file, allow_list, buffers, fix_imports, encoding, errors)
        return _pickle.load(
            file, fix_imports=fix_imports, encoding=encoding, errors=errors, buffers=buffers
        )
    except UnpicklingError as exc:
        if allow_list is None:
            _note_load_failure(exc)
        raise  # (restricted loading's own errors say what and where)
    except OSError:
        raise  # trouble reading the file, not with its content
    except Exception as exc:
        _note_load_failure(exc)
        raise


def load_bytes(
    data: bytes | bytearray | memoryview,
    allow_list: AllowList | None,
    buffers: Iterable[Any] | None,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    errors: str = "strict",
) -> Any:
    """:func:`loads` without its error notes (the wire words its own errors)."""
    if type(data) not in (bytes, bytearray, memoryview):
        # One view for the overrun check and the unpickler: another exporter (a
        # Python __buffer__, 3.12+) may give each of them other bytes.
        with contextlib.suppress(TypeError):  # (not bytes-like: pickle says so itself)
            data = memoryview(data)
    if allow_list is not None:
        return restricted_load(io.BytesIO(data), allow_list, buffers, fix_imports, encoding, errors)
    refuse_overrun(data)
    return _pickle.loads(
        data, fix_imports=fix_imports, encoding=encoding, errors=errors, buffers=buffers
    )


def _loads_failed(exc: Exception, data: Any) -> NoReturn:
    """Raise ``exc``, the failure of ``loads(data)``, with its note."""
    try:
        memoryview(data)
    except TypeError:
        raise exc from None  # not bytes: pickle's own TypeError says so
    _note_load_failure(exc)
    raise exc


def _note_load_failure(exc: Exception) -> None:
    exc.add_note(f"graphpickle: cannot load the pickle: {load_failure(exc)}")


def load_failure(exc: Exception) -> str:
    """What a loading error means, in words."""
    if isinstance(exc, EOFError) or "truncated" in str(exc):
        return "the data is truncated or empty"
    if isinstance(exc, ImportError):
        # (an extension that fails to load, numpy in a subinterpreter, names no module)
        if exc.name is None:
            return f"an import failed here: {exc}"
        return (
            f"it references module {exc.name!r}, which this interpreter cannot import "
            "(install it here, or register it for pickling by value on the sender)"
        )
    # (3.14 words it "module '__main__' has no attribute 'f'")
    if isinstance(exc, AttributeError) and (
        "Can't get attribute" in str(exc) or "has no attribute" in str(exc)
    ):
        return (
            "it references a global this interpreter does not have (was it pickled by "
            "reference from the sender's __main__ with plain pickle?)"
        )
    if "out-of-band" in str(exc):
        return (
            "it holds out-of-band buffers: pass those that dumps() handed to its "
            "buffer_callback, in order, as buffers="
        )
    if isinstance(exc, pickle.UnpicklingError | KeyError | ValueError | IndexError):
        return "the data is corrupted or is not a pickle"
    return "rebuilding an object failed"


# --- dumps and loads in C ----------------------------------------------------
# For a message of a few hundred bytes, creating a Pickler (its Python __init__,
# a BytesIO) and calling Python functions with keyword-only defaults cost ten
# times the pickling itself. With the extension built, ``dumps`` and ``loads``
# are ``_speedups`` objects that pickle with one of a few ready picklers (the
# pool: up to 4 per protocol) and call ``_pickle.loads`` directly; anything else
# (deterministic payloads, restricted loading, unusual arguments, a raised
# recursion limit on 3.11) goes to the Python functions above, which stay the
# reference. A pooled pickler's memo and state are reset after each dump, and
# the pools are dropped when a reducer table changes.

_F = TypeVar("_F", bound=Callable[..., Any])
_SIGNATURES = {"graphpickle": 0, "distributed": 1}


def accelerated_dumps(
    reference: _F,
    reducer_lookup: ReducerLookup | None,
    signature: str,
    code_blocks: ContextVar[Any] | None = None,
    *,
    classes_first: bool = False,
) -> _F:
    """A C stand-in for ``reference`` (a ``dumps`` with graphpickle's or
    distributed's signature) that pickles on pooled ``Pickler(file, protocol,
    buffer_callback, reducer_lookup=reducer_lookup, code_blocks=code_blocks)``s;
    ``reference`` itself without the extension. With ``classes_first``, a
    payload for a connection that keeps blocks writes its by-value classes
    first (``classes_first.py``)."""
    if _speedups is None:
        return reference

    def make(protocol: int) -> tuple[Pickler, Any, Any]:
        sink = _speedups.Sink()
        pickler = Pickler(
            sink,  # it has the write() a pickler uses
            protocol,
            sink.buffer if protocol >= 5 else None,
            reducer_lookup=reducer_lookup,
            code_blocks=code_blocks,
        )
        if classes_first:
            pickler._state.sink = sink
        return pickler, sink, pickler.reducer_override

    dumper = _speedups.Dumper(
        make,
        reference,
        _dump_failed,
        _pickle.Pickler.dump,
        _pickle.Pickler.clear_memo,
        _SIGNATURES[signature],
        DEEP_STACK_ABOVE,
        # A pooled pickler whose type table holds more types than this is not
        # reused; with the caches off (GRAPHPICKLE_NO_CACHE), none is: each
        # dumps() resolves types with a table of its own.
        MAX_SHARED_TYPES if CACHING else -1,
        # Tests set this module's _speedups to None to run the Python hook.
        globals(),
        restart=(ClassesFirst, restart_classes_first) if classes_first else None,
    )
    on_tables_changed(dumper.clear)
    return _standing_for(dumper, reference)


def accelerated_loads(
    reference: _F, signature: str, failed: Callable[[Exception, Any], Any] | None = None
) -> _F:
    """A C stand-in for ``reference`` (a ``loads`` with graphpickle's or
    distributed's signature) that calls ``_pickle.loads`` itself and, on
    failure, ``failed(exc, data)`` (``_loads_failed`` unless given), which raises
    or returns what the load gives instead (as ``reference`` does);
    ``reference`` without the extension."""
    if _speedups is None:
        return reference
    handler = _loads_failed if failed is None else failed
    loader = _speedups.Loader(_pickle.loads, reference, handler, _SIGNATURES[signature])
    return _standing_for(loader, reference)


def _standing_for(fast: Any, reference: _F) -> _F:
    # Name, docstring, module and (through __wrapped__) inspect.signature of the
    # Python function; pickled by reference under its name (``__reduce__``).
    functools.update_wrapper(fast, reference)
    return cast(_F, fast)


dumps = accelerated_dumps(dumps, None, "graphpickle")
loads = accelerated_loads(loads, "graphpickle")
