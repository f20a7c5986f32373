"""The bytes graphpickle writes, pinned: a fixed corpus (tests/payload_pins/corpus.py)
in default and deterministic modes, run in a fresh interpreter, must give the
digests tests/payload_pins/pins.json holds for this environment. A change of
layout or speed must not change one byte; a change of output that is meant is
re-pinned with scripts/pin-payloads and said in its commit."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent / "payload_pins"


def run_corpus(cwd: pathlib.Path, hash_seed: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run(
        [sys.executable, str(HERE / "corpus.py")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    output: dict[str, object] = json.loads(result.stdout)
    return output


def test_payload_bytes_are_pinned(tmp_path):
    run = run_corpus(tmp_path, "0")
    pins = json.loads((HERE / "pins.json").read_text())
    environment = run["environment"]
    if environment not in pins:
        pytest.skip(
            f"no pins for {environment} (pinned: {sorted(pins)}); "
            "scripts/pin-payloads adds them from a commit whose output is trusted"
        )
    expected = pins[environment]
    got = run["payloads"]
    assert isinstance(got, dict)
    changed = sorted(case for case in expected if got.get(case) != expected[case])
    assert not changed, f"payload bytes changed for: {changed}"
    assert sorted(got) == sorted(expected)


def test_the_corpus_does_not_depend_on_the_run(tmp_path):
    # Another directory and hash seed give the same digests: the pins can fail
    # only when graphpickle's output changes.
    assert run_corpus(tmp_path, "0") == run_corpus(pathlib.Path("/"), "12345")
