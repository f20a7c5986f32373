"""Installs graphpickle's integration in the subprocesses of distributed's and
dask's tests.

scripts/peer-suites copies it to site/ next to the tests; with
GP_PEER_SWAP=distributed (or dask) the conftest puts that directory on PYTHONPATH,
and Python imports sitecustomize at start-up (an exception here is printed, not
raised).
"""

import os

if os.environ.get("GP_PEER_SWAP") == "distributed":
    import graphpickle.integrations.dask_distributed

    graphpickle.integrations.dask_distributed.install()

if os.environ.get("GP_PEER_SWAP") == "dask":
    import graphpickle.integrations.dask_tokenize

    graphpickle.integrations.dask_tokenize.install()
