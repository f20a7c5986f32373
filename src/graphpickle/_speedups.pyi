from collections.abc import Callable, Sequence
from typing import Any

class Dispatch:
    def __init__(
        self,
        handlers: dict[type, Any],
        resolve: Callable[[type], Any],
        state: Any,
    ) -> None: ...
    def __call__(self, obj: Any, /) -> Any: ...

def buffer_nbytes(frames: Sequence[Any], /) -> list[int]: ...
def frames_have_lengths(frames: Sequence[Any], expected: Any, /) -> bool: ...
