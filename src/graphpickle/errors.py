"""Exceptions raised by graphpickle.

Both are subclasses of the standard library's, so code that already catches
``pickle.PicklingError`` or ``pickle.UnpicklingError`` keeps working.
"""

from __future__ import annotations

import pickle

__all__ = [
    "BudgetExceededError",
    "DeepRecursionError",
    "ForbiddenGlobalError",
    "LargeCaptureWarning",
    "PicklingError",
    "SignatureError",
    "UnpicklingError",
    "WireFormatError",
]


class PicklingError(pickle.PicklingError):
    """An object in the graph could not be pickled.

    ``path`` says where the object sits, starting at ``root`` (the object passed
    to ``dumps``), for example ``root['tasks'][('x', 3)]<arg 1>``; it is ``None``
    when the failing object could not be located. ``type_name`` is the qualified
    name of the failing object's type. The original exception is chained as
    ``__cause__``.
    """

    def __init__(self, message: str, *, path: str | None = None, type_name: str | None = None):
        super().__init__(message)
        self.path = path
        self.type_name = type_name

    # The names the other exceptions dump() raises carry the same facts under.
    @property
    def graphpickle_path(self) -> str | None:
        return self.path

    @property
    def graphpickle_type_name(self) -> str | None:
        return self.type_name


class DeepRecursionError(PicklingError, RecursionError):
    """A graph nested deeper than the pickler can follow, or a reduction that
    recurses without end.

    cloudpickle raises ``pickle.PicklingError`` there ("Could not pickle object
    as excessively deep recursion required"), pickle lets the ``RecursionError``
    through: this is both, so ``except pickle.PicklingError`` and ``except
    RecursionError`` (or ``RuntimeError``) written for either keep catching it.
    ``path`` names the deepest (or the recursing) object; the original
    ``RecursionError`` is chained as ``__cause__``.
    """


class UnpicklingError(pickle.UnpicklingError):
    """A payload could not be loaded: truncated, corrupted, not a pickle, or it
    references something this interpreter cannot import. The original exception
    is chained as ``__cause__``."""


class LargeCaptureWarning(UserWarning):
    """A function pickled by value captures a large global or closure variable,
    which then travels inside every payload that contains the function.

    The threshold is set with :func:`graphpickle.set_large_capture_threshold`.
    """


class ForbiddenGlobalError(UnpicklingError):
    """Restricted loading refused a global outside the allow-list, or what a
    payload would do with an allowed one. ``name`` is the global (``"module.qualname"``)
    or what was refused; ``opcode`` and ``offset`` say where in the payload (set by
    ``loads``, and said in a note; ``None`` when the input is a stream)."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name
        self.opcode: str | None = None
        self.offset: int | None = None


class BudgetExceededError(UnpicklingError):
    """Untrusted input asked for more work or memory than a budget allows (a
    tuple whose hash would take exponential time, a length the data does not
    hold, a memo index no pickler writes, a message that decompresses past its
    cap). ``budget`` names the budget, ``opcode`` and ``offset`` say where
    (``None`` where no opcode is involved, as in a wire message's frames)."""

    def __init__(
        self, message: str, *, budget: str, opcode: str | None = None, offset: int | None = None
    ) -> None:
        super().__init__(message)
        self.budget = budget
        self.opcode = opcode
        self.offset = offset


class WireFormatError(UnpicklingError):
    """A wire message is malformed: truncated, wrong lengths, unknown format
    version or compression, or objects pickled by value under another Python."""


class SignatureError(UnpicklingError):
    """A wire message's signature is missing, wrong or truncated: nothing in it
    was unpickled."""
