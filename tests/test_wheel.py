"""``python -m build`` gives an sdist and a wheel, and the wheel works where the
repo is not: installed into a fresh venv outside the repo, with its dependency
from the index, it imports from that venv, runs its C parts and its command.

The build runs on a copy of the working tree (nothing is written into the
repo), in build isolation: setuptools>=77 comes from the index, and so does
cloudpickle for the venv. Where the index cannot be reached the test skips,
except in CI (``CI`` set), where it fails. About 15-25 s here.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The build runs on a copy of the tree, its environment stripped of the switches,
# into a venv of its own: the same in every CI stage (docs/development.md).
pytestmark = pytest.mark.once
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DIST_NAME = f"{PROJECT['name']}-{PROJECT['version']}"
# The C parts: one compiled module per extension that setup.py declares.
EXTENSIONS = (ROOT / "setup.py").read_text().count("Extension(")

# What the build does not read and a copy of the tree should not carry: built
# extensions, caches and environments (several GB with the venvs).
_NOT_COPIED = (
    ".git",
    ".venv*",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "build",
    "dist",
    "*.egg-info",
    "*.so",
    "*.pyd",
)

# What pip prints when it cannot reach the index (no network, no proxy).
_OFFLINE = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "No matching distribution found for setuptools",
    "No matching distribution found for cloudpickle",
)


def _env() -> dict[str, str]:
    """The environment of every child: nothing that points into the repo, and
    neither of graphpickle's switches (CI runs the suite with them set)."""
    env = dict(os.environ)
    for name in (
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "GRAPHPICKLE_NO_SPEEDUPS",
        "GRAPHPICKLE_NO_CACHE",
    ):
        env.pop(name, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(*command: str | Path, cwd: Path, timeout: float = 240) -> str:
    """Run ``command``; its output, or a failure (a skip outside CI when it is
    the index that could not be reached)."""
    proc = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode == 0:
        return proc.stdout
    output = (
        f"$ {' '.join(map(str, command))}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    if any(sign in proc.stdout + proc.stderr for sign in _OFFLINE) and not os.environ.get("CI"):
        pytest.skip(f"the package index cannot be reached, so nothing can be built:\n{output}")
    raise AssertionError(f"exit status {proc.returncode}\n{output}")


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel that ``python -m build`` makes of the working
    tree (the wheel built from the sdist, as build does by default)."""
    base = tmp_path_factory.mktemp("build")
    assert not base.is_relative_to(ROOT), "the build must run outside the repo"
    tree = base / "graphpickle"
    shutil.copytree(
        ROOT,
        tree,
        ignore=lambda _, names: [
            name for name in names if any(fnmatch.fnmatch(name, p) for p in _NOT_COPIED)
        ],
    )
    out = base / "dist"
    _run(sys.executable, "-m", "build", "--outdir", out, tree, cwd=base)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


@pytest.fixture(scope="module")
def venv_python(dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the repo with the wheel installed (cloudpickle
    from the index): its interpreter."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    assert not venv.is_relative_to(ROOT), "the venv must be outside the repo"
    _run(sys.executable, "-m", "venv", venv, cwd=venv.parent)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _run(python, "-m", "pip", "install", "-q", dists[1], cwd=venv.parent)
    return python


def test_sdist_holds_the_license_the_stubs_and_the_c_sources(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(f"{DIST_NAME}/") for name in archive.getnames()}
        license_text = archive.extractfile(f"{DIST_NAME}/LICENSE")
        assert license_text is not None
        assert license_text.read() == (ROOT / "LICENSE").read_bytes()
    # Every C source, header and stub of the tree: the wheel is built from these.
    wanted = {"LICENSE", "pyproject.toml", "setup.py", "README.md", "src/graphpickle/py.typed"}
    for pattern in ("*.c", "*.h", "*.pyi"):
        found = {str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob(pattern)}
        assert found, f"no {pattern} under src/"
        wanted |= found
    assert wanted <= names, f"missing from {sdist.name}: {sorted(wanted - names)}"


def test_wheel_metadata_names_the_license_and_the_authors(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    dist_info = f"{DIST_NAME}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = HeaderParser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        assert archive.read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    assert metadata["License-Expression"] == PROJECT["license"]
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Author"] == PROJECT["authors"][0]["name"]
    assert metadata["Requires-Python"] == PROJECT["requires-python"]
    assert "graphpickle/py.typed" in names
    compiled = [n for n in names if n.endswith((".so", ".pyd"))]
    assert len(compiled) == EXTENSIONS, compiled


def test_the_wheel_runs_in_a_fresh_venv_outside_the_repo(venv_python: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert not elsewhere.is_relative_to(ROOT)
    payload = elsewhere / "payload.pkl"

    # One interpreter dumps a lambda and a __main__ function; a RuntimeWarning
    # (a C part that was not built, or stale) is an error.
    sender = elsewhere / "sender.py"
    sender.write_text(
        textwrap.dedent(
            """
            import json, sys, graphpickle

            def scale(x):
                return 3 * x

            print(graphpickle.__file__)
            print(sys.prefix)
            print(json.dumps(graphpickle.native_parts()))
            with open(sys.argv[1], "wb") as f:
                f.write(graphpickle.dumps({"inc": lambda x: x + 1, "scale": scale}))
            """
        )
    )
    where, prefix, parts = _run(
        venv_python, "-W", "error::RuntimeWarning", sender, payload, cwd=elsewhere
    ).splitlines()
    assert Path(where).resolve().is_relative_to(Path(prefix).resolve()), (where, prefix)
    assert not Path(where).resolve().is_relative_to(ROOT), where
    statuses = json.loads(parts)
    assert len(statuses) == EXTENSIONS and set(statuses.values()) == {"active"}, statuses

    # Another, fresh, loads it with plain pickle and calls both functions.
    loaded = _run(
        venv_python,
        "-c",
        "import pickle, sys; f = pickle.load(open(sys.argv[1], 'rb')); "
        "print(f['inc'](41), f['scale'](14))",
        payload,
        cwd=elsewhere,
    )
    assert loaded.split() == ["42", "42"]

    script = venv_python.with_name("graphpickle.exe" if os.name == "nt" else "graphpickle")
    version = _run(script, "--version", cwd=elsewhere)
    assert version.startswith(f"graphpickle {PROJECT['version']} "), version
    assert f"native parts ({EXTENSIONS} of {EXTENSIONS} active)" in version, version
