"""dask.distributed on graphpickle: one pass instead of pickle, scan, cloudpickle.

The public path of :mod:`graphpickle.integrations.dask_distributed`, where the code and
its documentation live."""

from .integrations.dask_distributed import (
    dask_setup,
    dumps,
    install,
    installed,
    loads,
    uninstall,
)

__all__ = ["dask_setup", "dumps", "install", "installed", "loads", "uninstall"]
