"""conftest.py of dask's tokenize tests as scripts/peer-suites runs them.

The script copies it next to the copied test file. With GP_PEER_SWAP=dask it
installs graphpickle's tokenize integration before the tests run, here and
(through sitecustomize.py) in the subprocesses they start, which inherit
PYTHONPATH.
"""

import os
from pathlib import Path

SWAP = os.environ.get("GP_PEER_SWAP") == "dask"
if SWAP:
    import graphpickle.integrations.dask_tokenize

    graphpickle.integrations.dask_tokenize.install()
    site = str(Path(__file__).with_name("site"))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))


def pytest_report_header():
    import graphpickle.integrations.dask_tokenize

    return [f"GP_PEER_SWAP={os.environ.get('GP_PEER_SWAP', '')}: installed={graphpickle.integrations.dask_tokenize.installed()}"]


def pytest_collection_modifyitems(items):
    # A run is only a comparison if the swap is what the run says it is.
    import graphpickle.integrations.dask_tokenize

    assert graphpickle.integrations.dask_tokenize.installed() == SWAP
