"""graphpickle: ship task graphs and Python objects between processes in one pass.

Everything the receiver can import is pickled by reference by the C pickler,
exactly as ``pickle.dumps`` would; only what it cannot import (functions and
classes of ``__main__``, lambdas, closures, dynamic classes, modules registered
for pickling by value) is pickled by value, through cloudpickle.
"""

from ._native import native_parts
from ._version import __version__
from .core.captures import get_large_capture_threshold, set_large_capture_threshold
from .core.fingerprint import fingerprint
from .core.pickler import DEFAULT_PROTOCOL, CloudPickler, Pickler, dump, dumps, load, loads
from .core.policy import (
    ByValueReason,
    list_registry_pickle_by_value,
    register_pickle_by_value,
    unregister_pickle_by_value,
)
from .core.reducers import Reducer, register_reducer, unregister_reducer
from .diagnostics import ExplainReport, explain
from .diagnostics.scan import InspectReport, inspect
from .errors import (
    BudgetExceededError,
    ForbiddenGlobalError,
    LargeCaptureWarning,
    PicklingError,
    SignatureError,
    UnpicklingError,
    WireFormatError,
)
from .restricted.unpickler import DATA_ONLY

__all__ = [
    "DATA_ONLY",
    "DEFAULT_PROTOCOL",
    "BudgetExceededError",
    "ByValueReason",
    "CloudPickler",
    "ExplainReport",
    "ForbiddenGlobalError",
    "InspectReport",
    "LargeCaptureWarning",
    "Pickler",
    "PicklingError",
    "Reducer",
    "SignatureError",
    "UnpicklingError",
    "WireFormatError",
    "__version__",
    "dump",
    "dumps",
    "explain",
    "fingerprint",
    "get_large_capture_threshold",
    "inspect",
    "list_registry_pickle_by_value",
    "load",
    "loads",
    "native_parts",
    "register_pickle_by_value",
    "register_reducer",
    "set_large_capture_threshold",
    "unregister_pickle_by_value",
    "unregister_reducer",
]
