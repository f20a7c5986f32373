"""conftest.py of Ray's tests as scripts/peer-suites-ray runs them.

Ray's own python/ray/tests/conftest.py needs much of Ray's development tree;
this one gives the fixtures the selected tests ask for, with the same meaning:
a Ray started for the test (``ray_start_regular``, its parameters are
``ray.init``'s; ``ray_start_2_cpus``) or for the module
(``ray_start_shared_local_modes``: Ray 2.60 refuses ``local_mode``, so only the
normal mode), ``shutdown_only`` (the test starts Ray, the fixture stops it) and
``enable_pickle_debug`` (RAY_PICKLE_VERBOSE_DEBUG=1), and those of the actor
tests (``ray_start_10_cpus``, ``ray_start_regular_shared``: a Ray for the module).

With GP_PEER_SWAP=ray the script sets RAY_RUNTIME_ENV_HOOK, so that every
``ray.init`` (the fixtures' and the tests' own) installs graphpickle in the
driver and its workers. Each Ray the fixtures start is checked: the run errors
out if the driver or a worker does not pickle as the pass says; so is each Ray
a test starts itself (``ray.init`` in the test, or ``ray.util.multiprocessing.Pool``
starting one), through ``ray.init`` wrapped below.
"""

import functools
import os

import pytest
import ray

SWAP = os.environ.get("GP_PEER_SWAP") == "ray"


def _installed_here():
    import graphpickle.integrations.ray as gpray

    return gpray.installed()


def _check():
    worker = ray.get(ray.remote(_installed_here).remote())
    if (_installed_here(), worker) != (SWAP, SWAP):
        raise RuntimeError(
            f"GP_PEER_SWAP={os.environ.get('GP_PEER_SWAP', '')}, but graphpickle is "
            f"installed in the driver: {_installed_here()}, in a worker: {worker}"
        )


_ray_init = ray.init


@functools.wraps(_ray_init)
def _checked_init(*args, **kwargs):
    context = _ray_init(*args, **kwargs)
    _check()
    return context


# Tests and ray.util.multiprocessing.Pool call ray.init through the module.
ray.init = _checked_init


def _start(**kwargs):
    kwargs.setdefault("num_cpus", 1)
    kwargs.setdefault("include_dashboard", False)
    return ray.init(**kwargs)


def pytest_report_header():
    return [f"GP_PEER_SWAP={os.environ.get('GP_PEER_SWAP', '')}, Ray {ray.__version__}"]


@pytest.fixture
def ray_start_regular(request):
    context = _start(**getattr(request, "param", {}))
    yield context
    ray.shutdown()


@pytest.fixture
def ray_start_2_cpus():
    context = _start(num_cpus=2)
    yield context
    ray.shutdown()


@pytest.fixture
def ray_start_10_cpus():
    context = _start(num_cpus=10)
    yield context
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_start_regular_shared():
    context = _start()
    yield context
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_start_shared_local_modes():
    context = _start()
    yield context
    ray.shutdown()


@pytest.fixture
def shutdown_only():
    yield None
    ray.shutdown()


@pytest.fixture
def enable_pickle_debug(monkeypatch):
    monkeypatch.setenv("RAY_PICKLE_VERBOSE_DEBUG", "1")
    yield
