"""``ProcessPoolExecutor`` that ships calls and results with graphpickle.

The public path of :mod:`graphpickle.integrations.futures`, where the code and
its documentation live."""

from .integrations.futures import (
    BrokenProcessPool,
    ProcessPoolExecutor,
)

__all__ = ["BrokenProcessPool", "ProcessPoolExecutor"]
