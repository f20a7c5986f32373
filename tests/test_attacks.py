"""Security claims, tested against attack payloads (benchmarks/security_corpus.py).

Every sample is loaded in a child interpreter under an audit hook that stops
what it would do (benchmarks/security_harness.py), so nothing really runs:

- unrestricted (plain ``pickle``), each attack shows the effect it declares:
  the corpus is real, and the other tests can fail;
- under ``graphpickle.loads(data, allowed=DATA_ONLY)``, each attack is refused
  (an ``UnpicklingError``, ``ForbiddenGlobalError`` included) before any effect,
  and sys.path, sys.modules, builtins, copyreg and every class and module
  DATA_ONLY names are unchanged;
- each benign sample loads under DATA_ONLY and equals the original;
- ``inspect`` says "code" for every attack and "data" for every benign sample.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from security_corpus import COMMAND, Sample, attacks, benign
from security_harness import Outcome, run

import graphpickle

ATTACKS = attacks()
BENIGN = benign()
# What COMMAND creates if anything of a control really ran.
RAN_MARKER = Path(COMMAND.split()[-1])


def _ids(samples: list[Sample]) -> list[str]:
    return [f"{s.category}: {s.name}" for s in samples]


@pytest.fixture(scope="module")
def control() -> dict[str, Outcome]:
    RAN_MARKER.unlink(missing_ok=True)
    return run(ATTACKS, "control")


@pytest.fixture(scope="module")
def restricted() -> dict[str, Outcome]:
    return run(ATTACKS, "restricted")


@pytest.fixture(scope="module")
def loaded() -> dict[str, Outcome]:
    return run(BENIGN, "benign")


def test_the_corpus_covers_every_category_and_enough_benign_data():
    assert {s.category for s in ATTACKS} | {"benign"} == {
        "direct code runners", "less known gadgets", "traversal", "state changes",
        "state that lies", "computed names", "parser confusion", "nested pickles", "by-value code", "benign",
    }  # fmt: skip
    assert len(BENIGN) >= 30
    assert len({s.name for s in ATTACKS + BENIGN}) == len(ATTACKS) + len(BENIGN)


@pytest.mark.parametrize("sample", ATTACKS, ids=_ids(ATTACKS))
def test_unrestricted_loading_shows_the_effect(sample, control):
    outcome = control[sample.name]
    assert outcome.shows(sample.effect), (sample.effect, outcome)


def test_the_hook_let_no_control_run_its_command(control):
    assert len(control) == len(ATTACKS)
    assert not RAN_MARKER.exists()


@pytest.mark.parametrize("sample", ATTACKS, ids=_ids(ATTACKS))
def test_restricted_loading_refuses_before_any_effect(sample, restricted):
    outcome = restricted[sample.name]
    assert outcome.outcome == "raised", outcome
    assert outcome.unpickling_error, outcome  # a refusal, not the payload failing on its own
    assert outcome.stopped == [], outcome
    assert outcome.changed == [], outcome
    assert outcome.blocked(sample.effect), outcome


@pytest.mark.parametrize("sample", BENIGN, ids=_ids(BENIGN))
def test_benign_data_loads_under_data_only_and_equals_the_original(sample, loaded):
    outcome = loaded[sample.name]
    assert outcome.outcome == "loaded", outcome
    assert outcome.equal, outcome
    assert outcome.stopped == [] and outcome.changed == [], outcome


@pytest.mark.parametrize("sample", ATTACKS, ids=_ids(ATTACKS))
def test_inspect_says_code_for_every_attack(sample):
    try:
        report = graphpickle.inspect(sample.data)
    except graphpickle.UnpicklingError as exc:  # not a pickle: what runs before the rest
        report = exc.report
        assert report is not None, exc
    assert report.verdict == "code", [(f.level, f.what) for f in report.findings]


@pytest.mark.parametrize("sample", BENIGN, ids=_ids(BENIGN))
def test_inspect_says_data_for_benign_data(sample):
    report = graphpickle.inspect(sample.data)
    assert report.verdict == "data", [(f.level, f.what) for f in report.findings]
    assert report.error is None
