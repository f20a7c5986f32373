"""Every Python example of the README and of docs/ runs as written.

Each file's ```python blocks run in order in one fresh interpreter, as the
``__main__`` of a script in an empty directory, sharing one namespace (a
reader goes through them in order, as a notebook would). What the prose takes
for granted (a connection class, a dask client, a socket) is made beforehand by
the file's setup below: visible here, never in the docs. A block that fails
names its file and line. Shell blocks are not run, but each script they name
must exist. Blocks fenced as ```python ray need a real Ray: tests/test_ray.py runs
them, in the Ray stages of CI.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from conftest import run_python

ROOT = Path(__file__).resolve().parent.parent
# The docs run as a reader runs them: once, in CI's first stage (docs/development.md).
pytestmark = pytest.mark.once
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The language, and " ray" for the blocks that need Ray.
_FENCE = re.compile(r"^```(\w*(?: ray)?)[^\n]*\n(.*?)^```", re.S | re.M)

# What the examples of a file take as given, made before its first block.
SETUP = {
    "README.md": """
        from distributed import Client, LocalCluster
        client = Client(LocalCluster(n_workers=1, processes=False, dashboard_address=None))
    """,
    "api.md": """
        import io, socket, graphpickle

        class Connection:  # an object that refuses to pickle
            def __init__(self, url):
                self.url, self.handle = url, socket.socket()
        def connect(url):
            return Connection(url)
        reduce_conn = lambda c: (connect, (c.url,))
        f = io.BytesIO()
        graph = {("t", i): (len, [i] * 3) for i in range(10)}
        with open("mylib.py", "w") as _out:  # a local module the workers lack
            _out.write("def helper(x):\\n    return x + 1\\n")
    """,
    "determinism.md": """
        import graphpickle, graphpickle.wire
        graph = {("t", i): (len, [i] * 3) for i in range(10)}
        secret = b"secret"
    """,
    "engines.md": """
        from distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=None)
    """,
    "security.md": """
        import graphpickle
    """,
    "wire.md": """
        import socket, threading, graphpickle
        graph = {("t", i): (len, [i] * 3) for i in range(10)}
        KEY, NEW_KEY = b"key", b"new key"
        sock, _peer = socket.socketpair()  # a peer that sends back what it gets
        def _echo():
            while data := _peer.recv(1 << 16):
                _peer.sendall(data)
        threading.Thread(target=_echo, daemon=True).start()
    """,
}

_RUNNER = """
import faulthandler, json, sys, traceback
# (guarded: a process pool's workers import this script again)
if __name__ == "__main__":
    faulthandler.dump_traceback_later(200, exit=True)  # where a block hangs, if one does
    blocks = json.loads(open(sys.argv[1]).read())
    namespace = {"__name__": "__main__"}
    for where, code in blocks:
        try:
            exec(compile(code, where, "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED: the block at {where}", file=sys.stderr)
            sys.exit(1)
    print("ran", len(blocks))
"""


def _blocks(path: Path) -> list[tuple[str, int, str]]:
    """``(language, line, code)`` of each fenced block of ``path``."""
    text = path.read_text()
    return [
        (m.group(1), text.count("\n", 0, m.start()) + 2, m.group(2)) for m in _FENCE.finditer(text)
    ]


def _python_blocks(path: Path) -> list[tuple[int, str]]:
    return [(line, code) for lang, line, code in _blocks(path) if lang == "python"]


@pytest.mark.parametrize(
    "path",
    [p for p in DOCUMENTS if _python_blocks(p)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_python_block_runs(tmp_path, path):
    blocks = [(f"<{path.name} setup>", textwrap.dedent(SETUP.get(path.name, "")))]
    blocks += [(f"{path.relative_to(ROOT)}:{line}", code) for line, code in _python_blocks(path)]
    listing = tmp_path / "blocks.json"
    listing.write_text(json.dumps(blocks))
    work = tmp_path / "work"
    work.mkdir()
    out = run_python(_RUNNER, str(listing), cwd=work, timeout=300)
    assert out.splitlines()[-1] == f"ran {len(blocks)}"


def test_the_scripts_that_shell_blocks_name_exist():
    named = set()
    for path in DOCUMENTS:
        for lang, _, code in _blocks(path):
            if lang in ("bash", "sh", "console", ""):
                named |= set(re.findall(r"(?<![\w/.-])(scripts/[\w.-]+)", code))
    assert named, "no shell block names a script: the check would be empty"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, missing
