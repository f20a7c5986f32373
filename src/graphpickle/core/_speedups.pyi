from collections.abc import Callable
from pickle import PickleBuffer
from typing import Any

VERSION: int
SET_LAYOUT: int
DICT_LAYOUT: int
SUBCLASS_LAYOUT: int

def str_keys(mapping: Any, /) -> bool: ...

class Dispatch:
    def __init__(
        self,
        handlers: dict[type, Any],
        resolve: Callable[[type], Any],
        state: Any,
    ) -> None: ...
    def __call__(self, obj: Any, /) -> Any: ...

def bytearray8_overruns(data: Any, /) -> bool: ...

class Sink:
    handed: int
    written: int
    mark: Any
    def write(self, data: Any, /) -> None: ...
    def buffer(self, buffer: PickleBuffer, /) -> Any: ...
    def take(self) -> bytes: ...
    def lend(self, callback: Callable[[PickleBuffer], Any] | None, /) -> None: ...

class Dumper:
    def __init__(
        self,
        make: Callable[[int], tuple[Any, Sink, Dispatch]],
        slow: Callable[..., bytes],
        failed: Callable[[Any, Any, Exception], Any],
        dump: Callable[[Any, Any], None],
        clear_memo: Callable[[Any], None],
        signature: int,
        deep_limit: int,
        max_types: int,
        switch: dict[str, Any],
        *,
        restart: tuple[type[BaseException], Callable[[Any, Sink, Any, Any, Any], bytes]]
        | None = None,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> bytes: ...
    def clear(self) -> None: ...
    def pooled(self) -> int: ...

class Loader:
    def __init__(
        self,
        loads: Callable[..., Any],
        slow: Callable[..., Any],
        failed: Callable[[Exception, Any], Any],
        signature: int,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def remember_by_reference(obj: Any, /) -> None: ...
def set_by_reference_policy(
    registries: list[set[str]],
    function_handler: Any,
    class_handler: Any,
    module_handler: Any,
    subimport: Any,
    /,
) -> None: ...
def set_remembered(
    code_handler: Any,
    builtin_types: dict[type, Any],
    codes: dict[int, Any],
    functions: dict[int, Any],
    captures_globals: dict[str, Any],
    missing: Any,
    /,
) -> None: ...
def function_snapshot(func: Any, names: tuple[str, ...], missing: Any, /) -> tuple[Any, ...]: ...
def same_objects(a: tuple[Any, ...], b: tuple[Any, ...], /) -> bool: ...
def modules_items() -> tuple[Any, ...] | None: ...
def same_modules(items: tuple[Any, ...], /) -> bool: ...

ENTRY_FIELDS: tuple[str, ...]
PARTS_FIELDS: tuple[str, ...]
SNAPSHOT_FIELDS: tuple[str, ...]

def set_session_reductions(
    block_reduction: Any,
    subimport: Any,
    function_blocks: dict[int, Any] | None,
    held_globals_type: type,
    session_type: type,
    function_ref: Any,
    /,
) -> None: ...
def set_function_layouts(builtins: Any, layouts: tuple[Any, ...], slow: Any, /) -> None: ...
def make_function(*args: Any) -> Any: ...
def set_function_refs(
    receiver_var: Any, receiver_type: type, slow: Any, held_parts: int, sent_parts: int, /
) -> None: ...
def function_ref(digest: bytes, /, *parts: Any) -> Any: ...
def subimport(name: str, /) -> Any: ...
