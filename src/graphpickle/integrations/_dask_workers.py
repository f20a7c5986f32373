"""The worker plugin that keeps a dask cluster's workers on graphpickle.

``dask_distributed.install(client)`` registers it with the scheduler, which
hands it to every worker that joins from then on: one started later by adaptive
scaling, one its nanny restarted, every one after ``client.restart()``. A
separate module, imported only by ``install``, so that importing the
integration does not import distributed's plugin machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

#: The name the plugin is registered under: registering again replaces it.
NAME = "graphpickle"


class InstallOnWorkers(WorkerPlugin):  # type: ignore[misc]  # (distributed is not typed)
    """Calls ``install()`` (``dask_distributed.install``, which travels to the
    workers by reference) in each worker that joins."""

    name = NAME

    def __init__(self, install: Callable[[], None]) -> None:
        self.install = install

    def setup(self, worker: Any) -> None:
        self.install()
