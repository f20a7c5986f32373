"""dask's ``tokenize`` on deterministic payloads: the same notebook code gives the
same keys in every process.

The public path of :mod:`graphpickle.integrations.dask_tokenize`, where the code and
its documentation live."""

from .integrations.dask_tokenize import (
    install,
    installed,
    uninstall,
)

__all__ = ["install", "installed", "uninstall"]
