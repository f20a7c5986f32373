"""Swap cloudpickle.dumps/dump for graphpickle.dumps/dump when GP_PEER_SWAP=cloudpickle.

scripts/peer-suites copies this module and graphpickle_peer_swap.pth into the
site-packages of .venv-peers, so it runs at start-up of every interpreter there:
the pytest process, and the subprocesses and the ipykernel kernel that
cloudpickle's tests start (they inherit the environment variable).

The swap is made right after cloudpickle is first imported rather than by
importing it here, so that an interpreter that never imports cloudpickle runs
unchanged. Only the two names the tests call change: cloudpickle.Pickler,
CloudPickler, loads and load stay cloudpickle's.
"""

import importlib.util
import os
import sys


def _swap(module):
    import graphpickle

    module.dumps = graphpickle.dumps
    module.dump = graphpickle.dump


class _SwapAfterImport:
    """A one-shot sys.meta_path finder: hands out cloudpickle's real spec, whose
    loader then runs _swap once the module has been executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "cloudpickle":
            return None
        sys.meta_path.remove(self)  # so that find_spec below finds the real module
        spec = importlib.util.find_spec(fullname)
        exec_module = spec.loader.exec_module

        def exec_and_swap(module):
            exec_module(module)
            _swap(module)

        spec.loader.exec_module = exec_and_swap
        return spec


if os.environ.get("GP_PEER_SWAP") == "cloudpickle":
    sys.meta_path.insert(0, _SwapAfterImport())
