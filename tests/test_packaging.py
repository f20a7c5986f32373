"""What pyproject.toml declares is what CI tests: every dependency floor is in
.ci/floor-constraints.txt, and the interpreter running this is a declared one."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)\s*(.*)$")


def _declared() -> dict[str, str]:
    """Each dependency's specifier, runtime and extras alike."""
    requirements = list(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        requirements.extend(extra)
    declared = {}
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        assert match, requirement
        name, spec = match.group(1).lower(), match.group(2).replace(" ", "")
        assert declared.setdefault(name, spec) == spec, f"{name} declared twice, differently"
    return declared


def _floors() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "floor-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.lower()] = version
    return pins


@pytest.mark.once  # reads two files: the same in every CI stage
def test_every_declared_floor_is_tested():
    floors = _floors()
    for name, spec in _declared().items():
        if spec.startswith("=="):
            assert name not in floors, f"{name} is pinned: no floor to test"
            continue
        lower = re.search(r">=([0-9][^,]*)", spec)
        assert lower, f"{name}{spec}: every range needs a floor that CI can install"
        pinned = floors.get(name)
        assert pinned is not None and Version(pinned) == Version(lower.group(1)), (
            f"{name}: floor {lower.group(1)} is not what .ci/floor-constraints.txt pins ({pinned})"
        )
    assert set(floors) <= set(_declared()), "a constraint for something not declared"


def test_this_python_is_declared_and_ci_runs_every_declared_one():
    declared = {
        classifier.rsplit(" :: ", 1)[1]
        for classifier in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", classifier)
    }
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in declared
    assert PROJECT["requires-python"] == f">={min(declared, key=lambda v: int(v.split('.')[1]))}"
    assert "Programming Language :: Python ::" in (ROOT / ".ci" / "run").read_text()
