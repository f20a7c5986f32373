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
    workers by reference) in each worker that joins, then sends what
    ``notice(worker)`` (by reference too) gives there (a stream message: the worker
    loads code blocks, and keeps them per connection or not) to the scheduler,
    if given: only once the scheduler has a handler for it, or its stream would
    break."""

    name = NAME

    def __init__(
        self,
        install: Callable[[], None],
        notice: Callable[[Any], dict[str, Any]] | dict[str, Any] | None = None,
    ) -> None:
        self.install = install
        self.notice = notice

    def setup(self, worker: Any) -> None:
        self.install()
        if self.notice is not None:
            # (a dict: the plugin of an older graphpickle, whose format this one refuses)
            notice = self.notice(worker) if callable(self.notice) else dict(self.notice)
            worker.batched_send(notice)
