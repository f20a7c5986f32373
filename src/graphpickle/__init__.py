"""graphpickle: ship task graphs and Python objects between processes in one pass.

Everything the receiver can import is pickled by reference by the C pickler,
exactly as ``pickle.dumps`` would; only what it cannot import (functions and
classes of ``__main__``, lambdas, closures, dynamic classes, modules registered
for pickling by value) is pickled by value, through cloudpickle.
"""

from ._captures import get_large_capture_threshold, set_large_capture_threshold
from ._pickler import DEFAULT_PROTOCOL, CloudPickler, Pickler, dump, dumps, load, loads
from ._policy import (
    ByValueReason,
    list_registry_pickle_by_value,
    register_pickle_by_value,
    unregister_pickle_by_value,
)
from ._reducers import Reducer, register_reducer, unregister_reducer
from ._restricted import DATA_ONLY
from ._scan import InspectReport, inspect
from .determinism import fingerprint
from .diagnostics import ExplainReport, explain
from .errors import (
    ForbiddenGlobalError,
    LargeCaptureWarning,
    PicklingError,
    SignatureError,
    UnpicklingError,
    WireFormatError,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "DATA_ONLY",
    "DEFAULT_PROTOCOL",
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
    "register_pickle_by_value",
    "register_reducer",
    "set_large_capture_threshold",
    "unregister_pickle_by_value",
    "unregister_reducer",
]
