"""Ray on graphpickle: task arguments, results, the object store and remote code.

Ray pickles everything with the cloudpickle it vendors (``ray.cloudpickle``),
which each of its serializing modules imports under a name of its own
(``ray._private.serialization.pickle``, ``ray._raylet.ray_pickle``, ...).
:func:`install` points those names at a stand-in whose ``dumps`` is one
graphpickle pass and whose ``loads`` is ``pickle.loads`` with graphpickle's note
on failure; everything else (``CloudPickler`` and its class-level table, where
Ray and ``ray.util.register_serializer`` keep their reducers) is
``ray.cloudpickle``'s own. Ray's reducers are found through a
``reducer_lookup`` that reads that table, so object refs and actor handles
nested in arguments are still tracked by Ray, registered serializers still run,
and buffers Ray's writer takes stay out of band. Ray's serializer, which walks a
value with msgpack and pickles item by item what msgpack cannot write, pickles
a list or dict of such objects whole instead (:func:`_serialize_to_msgpack`).

In a driver, one call starts Ray with graphpickle in the driver and in every
worker it starts (each worker imports :data:`PRELOAD_MODULE`, named in Ray's
``preload_python_modules``, before it takes work: also those that replace a
dead one, with no ``runtime_env`` to slow their start)::

    import graphpickle.integrations.ray as gpray

    gpray.init(num_cpus=4)       # ray.init(...) with graphpickle everywhere

or, with no change to the driver's code (Ray calls the hook in ``ray.init``;
the workers get graphpickle through a ``runtime_env`` setup hook)::

    RAY_RUNTIME_ENV_HOOK=graphpickle.integrations.ray.runtime_env_hook python driver.py

or, with ``ray.init`` called elsewhere::

    gpray.install()                                  # this process
    ray.init(runtime_env=gpray.runtime_env({...}))   # and the workers

On a cluster started with ``ray start``,
``RAY_preload_python_modules=graphpickle.integrations._ray_worker`` in each
node's environment does what :func:`init` does for a local Ray.

Modules registered for pickling by value through ``ray.cloudpickle`` (Ray's
vendored copy keeps a registry of its own), ``cloudpickle`` or graphpickle are
all pickled by value, whenever they were registered.

A Ray version this module was not checked against, or internals that moved,
make :func:`install` refuse with :class:`RayIntegrationError` before it
changes anything.
"""

from __future__ import annotations

import _pickle
import collections
import importlib
import os
import pickle
import types
from collections.abc import Callable, Mapping
from typing import Any, cast

from .._cloudpickle_internals import registry_of
from ..core.pickler import _loads_failed, accelerated_dumps
from ..core.policy import add_registry, remove_registry
from ..core.reducers import Reducer, forget_lookup

__all__ = [
    "PRELOAD_MODULE",
    "SUPPORTED_RAY",
    "RayIntegrationError",
    "init",
    "install",
    "installed",
    "runtime_env",
    "runtime_env_hook",
    "uninstall",
    "worker_setup",
]

#: The Ray minor versions whose internals this module was checked against.
SUPPORTED_RAY = ((2, 60),)

#: The names under which Ray's modules hold ``ray.cloudpickle`` and pickle with it.
#: Every one must be there, and be ``ray.cloudpickle``, or install() refuses.
_TARGETS = (
    ("ray._private.serialization", "pickle"),  # arguments, results, ray.put/get
    ("ray._common.serialization", "pickle"),  # remote functions, actor classes
    ("ray._private.function_manager", "pickle"),  # their loading on workers
    ("ray._private.worker", "pickle"),
    ("ray._raylet", "ray_pickle"),
    ("ray.exceptions", "pickle"),  # RayTaskError and its cause
    ("ray._private.runtime_env.setup_hook", "pickle"),
    ("ray.job_config", "pickle"),
)

#: ``worker_process_setup_hook`` value of a runtime environment.
_HOOK = f"{__name__}.worker_setup"
#: Where :func:`runtime_env` keeps a setup hook the user had: run after ours.
_NEXT_HOOK_VAR = "GRAPHPICKLE_RAY_NEXT_SETUP_HOOK"


class RayIntegrationError(RuntimeError):
    """The installed Ray is not one this integration knows how to change."""


# --- Ray's reducers ------------------------------------------------------------
# Ray (ObjectRef, ActorHandle, DynamicObjectRefGenerator, CompiledDAGRef) and
# ray.util.register_serializer write their reducers into CloudPickler's
# class-level dict (through ``CloudPickler.dispatch``, a ChainMap over it and
# copyreg's table). cloudpickle's own entries there (code, cells, properties,
# ...) are graphpickle's business: only the others are Ray's. Like a pickler's
# dispatch table, the table is asked for the exact type.

_table: dict[type, Any] = {}  # CloudPickler._dispatch_table, once installed
_seen: dict[type, Any] = {}  # a copy of it, as the remembered answers saw it
_cloudpickle_module = ""  # the vendored cloudpickle's module name


def _ray_lookup(cls: type) -> Reducer | None:
    reducer = _table.get(cls)
    if reducer is None or getattr(reducer, "__module__", None) == _cloudpickle_module:
        return None
    return cast(Reducer, reducer)


def _check_table() -> None:
    """Forget the remembered answers if Ray's table changed since (a
    ``register_serializer`` or ``deregister_serializer``, an ObjectRef reducer
    registered when Ray connected). A dict comparison: under a microsecond for
    Ray's few dozen entries."""
    if _table != _seen:
        _seen.clear()
        _seen.update(_table)
        forget_lookup(_ray_lookup)


def _reference_dumps(
    obj: Any,
    protocol: int | None = None,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
) -> bytes:
    """What ``_fast_dumps`` does without graphpickle's extension."""
    import io

    from ..core.pickler import Pickler

    out = io.BytesIO()
    Pickler(out, protocol, buffer_callback=buffer_callback, reducer_lookup=_ray_lookup).dump(obj)
    return out.getvalue()


_fast_dumps = accelerated_dumps(_reference_dumps, _ray_lookup, "graphpickle")


def dumps(
    obj: Any,
    protocol: int | None = None,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
) -> bytes:
    """``ray.cloudpickle.dumps`` in one graphpickle pass, with Ray's reducers."""
    _check_table()
    return _fast_dumps(obj, protocol, buffer_callback)


def dump(
    obj: Any,
    file: Any,
    protocol: int | None = None,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
) -> None:
    """``ray.cloudpickle.dump``: :func:`dumps` written to ``file``."""
    file.write(dumps(obj, protocol, buffer_callback))


def loads(data: Any, /, *, buffers: Any = None, **kwargs: Any) -> Any:
    """``ray.cloudpickle.loads`` (``pickle.loads``), with graphpickle's note in
    words when it fails (a module or ``__main__`` name the worker lacks)."""
    try:
        return _pickle.loads(data, buffers=buffers, **kwargs)
    except Exception as exc:
        _loads_failed(exc, data)


class _RayPickle(types.ModuleType):
    """What Ray's modules see as ``ray.cloudpickle`` once installed: graphpickle's
    ``dumps``/``dump``/``loads``; every other name is ``ray.cloudpickle``'s."""

    def __init__(self, original: types.ModuleType) -> None:
        super().__init__(original.__name__, original.__doc__)
        self.__dict__["_original"] = original
        self.__dict__.update(dumps=dumps, dump=dump, loads=loads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_original"], name)


# --- Ray's serializer: graphs it would only hand to the pickler ------------------
# SerializationContext.serialize writes a value with msgpack (so that other
# languages can read it) and hands each object msgpack cannot write (a class
# instance, a tuple) to a hook that collects them into a list, pickled in one
# pass after; the value is then Python's only (metadata "PYTHON"). For a list
# or dict of such objects that is a Python call and an ExtType per item, then
# the same again on loading (about 80 ms for 100,000 objects, as much as
# graphpickle's pass). When the first item already makes the value Python's
# only, the whole value is pickled instead: its msgpack part is one ExtType
# (index 0 of a list holding the value), which Ray's loader reads as it reads
# any other. Refs, Ray's reducers and out-of-band buffers go through Ray's own
# _serialize_to_pickle5, as in the per-item path.

#: What Ray's msgpack packer writes itself (a value of another type, also an
#: int beyond 64 bits, goes to the hook).
_MSGPACK_NATIVE = frozenset({type(None), bool, int, float, str, bytes, list, dict})


class _Whole:
    """What Ray's msgpack packer is given, once, to write the ExtType that
    stands for the value pickled whole."""

    __slots__ = ()


_whole_msgpack = b""  # that ExtType, as Ray's packer writes it (made by install)


def _pickled_whole(value: Any) -> bool:
    """Whether Ray's serializer would make ``value`` Python's only at its first
    item: a non-empty exact list or dict whose first item (value) msgpack
    cannot write."""
    kind = type(value)
    if kind is list:
        return bool(value) and type(value[0]) not in _MSGPACK_NATIVE
    if kind is dict:
        return bool(value) and type(next(iter(value.values()))) not in _MSGPACK_NATIVE
    return False


def _serialize_to_msgpack(context: Any, value: Any) -> Any:
    """``SerializationContext._serialize_to_msgpack``, with graphs pickled whole."""
    if not _pickled_whole(value):
        return _serializer_originals["_serialize_to_msgpack"](context, value)
    module = _serializer_module
    metadata = module.ray_constants.OBJECT_METADATA_TYPE_PYTHON
    pickled = context._serialize_to_pickle5(metadata, [value])
    return module.MessagePackSerializedObject(metadata, _whole_msgpack, [], pickled)


_serializer_originals: dict[str, Any] = {}  # SerializationContext's methods replaced
_serializer_module: Any = None  # ray._private.serialization, once installed
_SERIALIZER = "ray._private.serialization"


def _check_serializer(serialization: types.ModuleType) -> bytes:
    """What :func:`_serialize_to_msgpack` relies on in Ray's serializer, checked;
    returns the ExtType that stands for a value pickled whole."""
    context = getattr(serialization, "SerializationContext", None)
    packer: Any = getattr(serialization, "MessagePackSerializer", None)
    constants = getattr(serialization, "ray_constants", None)
    methods = vars(context) if isinstance(context, type) else {}
    if not (
        all(
            isinstance(methods.get(name), types.FunctionType)
            for name in ("_serialize_to_msgpack", "_serialize_to_pickle5")
        )
        and callable(getattr(serialization, "MessagePackSerializedObject", None))
        and isinstance(getattr(constants, "OBJECT_METADATA_TYPE_PYTHON", None), bytes)
        and callable(getattr(packer, "dumps", None))
        and callable(getattr(packer, "loads", None))
    ):
        raise RayIntegrationError(
            "ray._private.serialization's SerializationContext, MessagePackSerializer or "
            "MessagePackSerializedObject moved: nothing was installed"
        )
    whole = packer.dumps(_Whole(), lambda obj: 0)
    if packer.loads(whole, lambda index: (_Whole, index)) != (_Whole, 0):
        raise RayIntegrationError(
            "Ray's msgpack layer no longer reads back an object its hook wrote: "
            "nothing was installed"
        )
    return cast(bytes, whole)


# --- install -------------------------------------------------------------------

_originals: dict[tuple[str, str], Any] = {}
_registries: list[set[str]] = []  # the by-value registries install() added


def _check_ray() -> tuple[types.ModuleType, set[str], bytes, list[tuple[types.ModuleType, str]]]:
    """Everything install() relies on, checked before anything changes:
    ``ray.cloudpickle``, its by-value registry and the modules holding it."""
    try:
        import ray
        import ray.cloudpickle as ray_cloudpickle
    except ImportError as exc:
        raise RayIntegrationError(f"Ray is not installed: {exc}") from exc
    version = getattr(ray, "__version__", "unknown")
    try:
        minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        minor = ()
    if minor not in SUPPORTED_RAY:
        known = ", ".join(f"{major}.{minor_}" for major, minor_ in SUPPORTED_RAY)
        raise RayIntegrationError(
            f"graphpickle's Ray integration knows Ray {known}, not {version}: nothing was installed"
        )
    pickler = getattr(ray_cloudpickle, "CloudPickler", None)
    table = vars(pickler).get("_dispatch_table") if isinstance(pickler, type) else None
    chain = getattr(pickler, "dispatch", None)
    if not (
        type(table) is dict
        and isinstance(chain, collections.ChainMap)
        and chain.maps
        and chain.maps[0] is table
    ):
        raise RayIntegrationError(
            "ray.cloudpickle.CloudPickler no longer keeps Ray's reducers in the "
            "class-level '_dispatch_table' dict behind 'dispatch': nothing was installed"
        )
    # ray.cloudpickle.register_pickle_by_value writes to a set of its own.
    vendored = getattr(ray_cloudpickle, "cloudpickle", None)
    registry = registry_of(vendored) if isinstance(vendored, types.ModuleType) else None
    register = getattr(ray_cloudpickle, "register_pickle_by_value", None)
    if registry is None or getattr(vendored, "register_pickle_by_value", None) is not register:
        raise RayIntegrationError(
            "ray.cloudpickle no longer keeps its by-value registry in "
            "ray.cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES: nothing was installed"
        )
    targets = []
    for module_name, name in _TARGETS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RayIntegrationError(
                f"Ray {version} has no module {module_name} ({exc}): nothing was installed"
            ) from exc
        current = vars(module).get(name)
        if current is not ray_cloudpickle and not isinstance(current, _RayPickle):
            raise RayIntegrationError(
                f"{module_name}.{name} is {current!r}, not ray.cloudpickle, in Ray "
                f"{version}: nothing was installed"
            )
        targets.append((module, name))
    whole = _check_serializer(importlib.import_module(_SERIALIZER))
    return ray_cloudpickle, registry, whole, targets


def install() -> None:
    """Make this process pickle with graphpickle wherever Ray pickles.

    Workers get it from :func:`init` or :func:`runtime_env`. Raises
    :class:`RayIntegrationError`, having changed nothing, if the installed Ray
    is not one this module knows. Calling it again does nothing more."""
    global _cloudpickle_module, _table, _whole_msgpack, _serializer_module
    ray_cloudpickle, registry, whole, targets = _check_ray()
    table = vars(ray_cloudpickle.CloudPickler)["_dispatch_table"]
    if table is not _table:
        _table.clear()
        _seen.clear()
        forget_lookup(_ray_lookup)
    _table = table
    _cloudpickle_module = ray_cloudpickle.CloudPickler.__module__
    # Read live, as cloudpickle's own: registrations and unregistrations made
    # through ray.cloudpickle after this call count.
    add_registry(registry)
    if not any(known is registry for known in _registries):  # (sets compare by value)
        _registries.append(registry)
    _whole_msgpack = whole
    _serializer_module = importlib.import_module(_SERIALIZER)
    context = _serializer_module.SerializationContext
    if vars(context)["_serialize_to_msgpack"] is not _serialize_to_msgpack:
        _serializer_originals["_serialize_to_msgpack"] = vars(context)["_serialize_to_msgpack"]
        context._serialize_to_msgpack = _serialize_to_msgpack
    shim = _RayPickle(ray_cloudpickle)
    for module, name in targets:  # nothing below can fail half-way
        current = vars(module)[name]
        if isinstance(current, _RayPickle):
            continue
        _originals[(module.__name__, name)] = current
        setattr(module, name, shim)


def uninstall() -> None:
    """Undo :func:`install` in this process (workers keep theirs until they exit)."""
    for (module_name, name), original in _originals.items():
        setattr(importlib.import_module(module_name), name, original)
    _originals.clear()
    for registry in _registries:
        remove_registry(registry)
    _registries.clear()
    if _serializer_module is not None:  # (the originals stay known: a call may be under way)
        for name, original in _serializer_originals.items():
            setattr(_serializer_module.SerializationContext, name, original)


def installed() -> bool:
    """Whether this process pickles with graphpickle wherever Ray pickles."""
    if not _originals or _serializer_module is None:
        return False
    method = vars(_serializer_module.SerializationContext)["_serialize_to_msgpack"]
    return method is _serialize_to_msgpack and all(
        isinstance(vars(importlib.import_module(module_name)).get(name), _RayPickle)
        for module_name, name in _TARGETS
    )


def worker_setup() -> None:
    """The ``worker_process_setup_hook`` :func:`runtime_env` sets: :func:`install`,
    then the hook the runtime environment had before, if it named one as a
    ``"module.function"`` string."""
    install()
    following = os.environ.get(_NEXT_HOOK_VAR)
    if following:
        module_name, _, name = following.rpartition(".")
        getattr(importlib.import_module(module_name), name)()


def _then(following: Callable[[], Any]) -> Callable[[], None]:
    """A setup hook that installs graphpickle, then calls ``following``: Ray
    pickles it (by value: it is a closure) into its store as it does the
    callable it replaces, and each worker loads and calls it."""

    def setup() -> None:
        install()
        following()

    # (Ray keeps the hook's name in the runtime_env, for its users to read.)
    setup.__name__ = getattr(following, "__name__", type(following).__name__)
    vars(setup)[_CHAINED] = following
    return setup


#: The attribute by which a hook made by :func:`_then` is known again.
_CHAINED = "__graphpickle_chains__"


def runtime_env(env: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``env`` (a ``ray.init``/job/task ``runtime_env``) with graphpickle installed
    in each worker process it starts. A setup hook already there runs after
    graphpickle's: named as a ``"module.function"`` string, or a callable (as
    Ray takes it). Each new worker of a job with a ``runtime_env`` waits for
    Ray's runtime environment agent: :func:`init` avoids one when it starts
    Ray itself."""
    merged = dict(env or {})
    following = merged.get("worker_process_setup_hook")
    if following is None or following == _HOOK or hasattr(following, _CHAINED):
        merged.setdefault("worker_process_setup_hook", _HOOK)
    elif isinstance(following, str):
        env_vars = dict(merged.get("env_vars") or {})
        env_vars[_NEXT_HOOK_VAR] = following
        merged["env_vars"] = env_vars
        merged["worker_process_setup_hook"] = _HOOK
    elif callable(following):
        merged["worker_process_setup_hook"] = _then(following)
    else:
        raise TypeError(
            "a runtime_env's worker_process_setup_hook is a callable or a "
            f"'module.function' string, not {following!r}"
        )
    return merged


def runtime_env_hook(env: Mapping[str, Any] | None) -> dict[str, Any]:
    """Ray's ``RAY_RUNTIME_ENV_HOOK``: with
    ``RAY_RUNTIME_ENV_HOOK=graphpickle.integrations.ray.runtime_env_hook`` in a
    driver's environment, every ``ray.init`` there installs graphpickle in the
    driver and in its workers, with no change to the driver's code (through a
    ``runtime_env``: see :func:`runtime_env`)."""
    install()
    return runtime_env(env)


#: The module each worker of a Ray that :func:`init` starts imports first.
PRELOAD_MODULE = f"{__package__}._ray_worker"


def _starts_local_ray(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether ``ray.init(*args, **kwargs)`` would start a local Ray rather than
    connect to one, decided as ``ray.init`` decides it (``RAY_ADDRESS``, a
    cluster started with ``ray start`` on this machine, ``address``). Unsure
    (Ray's function moved, or raised): ``False``, and the runtime_env way."""
    from ray._private import services

    decide = getattr(services, "canonicalize_bootstrap_address", None)
    forget = getattr(getattr(services, "find_gcs_addresses", None), "cache_clear", None)
    if not callable(decide) or not callable(forget):
        return False
    address = args[0] if args else kwargs.get("address")
    try:
        forget()  # (as ray.init does: a cluster may have started or stopped)
        return decide(address, kwargs.get("_temp_dir")) is None
    except Exception:  # ray.init raises it again, in its words
        return False


_runtime_env = runtime_env  # init() takes ray.init's keyword of the same name


def init(*args: Any, runtime_env: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """``ray.init(*args, **kwargs)`` with graphpickle installed in this process and
    in every worker Ray starts for it; returns what ``ray.init`` returns.

    A local Ray that this call starts gets :data:`PRELOAD_MODULE` in its
    ``preload_python_modules`` (each worker imports it before it takes work),
    and ``runtime_env`` is passed on as it is: new workers start as fast as
    stock Ray's. Connecting to a running Ray, the workers get it through
    :func:`runtime_env`."""
    import ray

    install()
    if not _starts_local_ray(args, kwargs):
        return ray.init(*args, runtime_env=_runtime_env(runtime_env), **kwargs)
    system_config = dict(kwargs.pop("_system_config", None) or {})
    preload = list(system_config.get("preload_python_modules") or [])
    if PRELOAD_MODULE not in preload:
        preload.append(PRELOAD_MODULE)
    system_config["preload_python_modules"] = preload
    return ray.init(*args, runtime_env=runtime_env, _system_config=system_config, **kwargs)
