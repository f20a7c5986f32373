"""conftest.py of distributed's protocol tests as scripts/peer-suites runs them.

The script copies it next to the copied test files. With GP_PEER_SWAP=distributed
it installs graphpickle's integration before the test modules are imported, so
that their `from distributed.protocol.pickle import dumps, loads` get
graphpickle's, and (through sitecustomize.py) in the subprocesses they start.
"""

import os
from pathlib import Path

SWAP = os.environ.get("GP_PEER_SWAP") == "distributed"
if SWAP:
    import graphpickle.integrations.dask_distributed

    graphpickle.integrations.dask_distributed.install()
    # Children (Nanny workers, the scripts some tests run) inherit PYTHONPATH.
    site = str(Path(__file__).with_name("site"))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))

# What distributed's own conftest.py loads: its fixtures and its resource-leak
# checks. Its --runslow option is left out: the slow tests always run here.
from distributed.utils_test import *  # noqa: E402, F403

pytest_plugins = ["distributed.pytest_resourceleaks"]

# Where graphpickle.integrations.dask_distributed's functions are defined (their __module__).
GRAPHPICKLE = "graphpickle.integrations.dask_distributed"
EXPECTED = GRAPHPICKLE if SWAP else "distributed.protocol.pickle"


def pytest_report_header():
    from distributed.protocol import pickle

    return [
        f"GP_PEER_SWAP={os.environ.get('GP_PEER_SWAP', '')}: dumps from {pickle.dumps.__module__}"
    ]


def pytest_collection_modifyitems(items):
    # A run is only a comparison if the swap reached the names the tests call.
    from distributed.protocol import pickle

    assert pickle.dumps.__module__ == EXPECTED, pickle.dumps
    for module in {getattr(item, "module", None) for item in items} - {None}:
        for name in ("dumps", "loads"):
            module_of = getattr(getattr(module, name, None), "__module__", None)
            if module_of in ("distributed.protocol.pickle", GRAPHPICKLE):
                assert module_of == EXPECTED, (module.__name__, name, module_of)
