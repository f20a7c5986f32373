"""Imported by each Ray worker process before it accepts work: installs
graphpickle there (``graphpickle.integrations.ray.install``).

:func:`graphpickle.integrations.ray.init` names this module in Ray's
``preload_python_modules`` (a system config of the local Ray it starts; on a
cluster started with ``ray start``, the ``RAY_preload_python_modules``
environment variable of every node). The raylet passes it to each worker it
starts, prestarted ones included, with no ``runtime_env``: a job with a
``runtime_env`` cannot use the workers Ray prestarts, and each new worker then
waits for the runtime environment agent (about 0.4 s here).

A Ray this integration does not know leaves the worker on stock Ray, with a
warning in its log: graphpickle's payloads load with plain ``pickle.loads``,
so nothing it receives is lost.
"""

from __future__ import annotations

import warnings

from .ray import RayIntegrationError, install

try:
    install()
except RayIntegrationError as exc:  # (the worker's log: Ray would only say "failed to preload")
    warnings.warn(f"graphpickle is not installed in this Ray worker: {exc}", stacklevel=1)
