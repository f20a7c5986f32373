"""Progress bars of the command line: on a terminal only, and nothing left behind."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from graphpickle.cli import console


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("with_rich", [True, False])
def test_progress_writes_nothing_when_stderr_is_not_a_terminal(monkeypatch, with_rich):
    if not with_rich:
        monkeypatch.setattr(console, "_rich", None)
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    assert list(console.progress(iter(range(5)), 5, "work")) == [0, 1, 2, 3, 4]
    assert piped.getvalue() == ""  # no bar, and no blank line where it was


def test_plain_progress_on_a_terminal_is_erased_when_done(monkeypatch):
    monkeypatch.setattr(console, "_rich", None)
    for stop_at in (None, 1):  # run to the end, or left early
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        for i in console.progress(range(3), 3, "work"):
            if i == stop_at:
                break
        frames = terminal.getvalue().split("\r")
        assert any(f.endswith("[" + "#" * 10 + "." * 20 + "] 1/3") for f in frames), frames
        # The last frame blanks the line, and the cursor goes back to its start.
        assert frames[-1] == "" and frames[-2].strip() == "" and frames[-2]


def test_rich_progress_draws_on_a_terminal(tmp_path):
    pytest.importorskip("rich")
    import pty

    code = (
        "import time\n"
        "from graphpickle.cli.console import progress\n"
        "for _ in progress(range(3), 3, 'working'):\n"
        "    time.sleep(0.3)\n"
        "print('done')\n"
    )
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=follower,
            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"},
        )
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        stdout, _ = proc.communicate(timeout=60)
    finally:
        os.close(leader)
    assert proc.returncode == 0
    assert stdout == b"done\n"
    assert b"working" in drawn
