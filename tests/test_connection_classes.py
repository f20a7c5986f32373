"""What a ``__main__`` class sent again and again on one connection must keep:
what a fresh cloudpickle load of each task gives.

A class's bytes go once per connection (graphpickle.core.classes_first), its
objects are made again in every load (docs/performance.md, "A class once per
connection: its bytes, not its objects"): these tests pin the two things a
class held by the receiver between payloads would get wrong, so that any such
cache has to pass them:

- in one payload, a ``__main__`` function and the methods of a ``__main__``
  class share one globals dict (cloudpickle's one per module and payload): a
  global the task's function writes is the one its class's method reads;
- every payload applies the class's state again: a class attribute a task
  changed on the worker is back to the sender's value in the next task, and
  one the sender changed between tasks arrives.

Each sequence is written on one connection by a sender run as ``__main__`` and
loaded in a fresh receiver, against cloudpickle's payloads of the same objects."""

from __future__ import annotations

import json

import pytest
from conftest import run_python
from test_connection import READ_SCRIPT, WRITE_SCRIPT

from graphpickle._switches import CACHING

pytestmark = pytest.mark.skipif(not CACHING, reason="GRAPHPICKLE_NO_CACHE=1: no block is kept")

_SENDER = (
    WRITE_SCRIPT
    + """
import dataclasses, pickle, sys, cloudpickle

FLAG = "the sender's"

@dataclasses.dataclass
class Point:
    x: int
    tags = []  # a class attribute the tasks and the sender change

    def flag(self):
        return FLAG

def task(p):
    global FLAG
    FLAG = f"set by task {p.x}"
    Point.tags.append(p.x)
    return [p.flag(), list(Point.tags), FLAG]

sender = connection.Sender()
rows = []
for i in range(4):
    if i == 2:
        Point.tags.append("the sender's")
    rows.append((write(sender, (task, Point(i))), cloudpickle.dumps((task, Point(i)))))
with open(sys.argv[1], "wb") as out:
    pickle.dump(rows, out)
"""
)

_RECEIVER = (
    READ_SCRIPT
    + """
import graphpickle.integrations.dask_distributed as gpd
which = int(sys.argv[2])
seen = []
for ours, theirs in sent:
    func, point = gpd.loads(ours) if which else pickle.loads(theirs)
    seen.append(func(point))
print(json.dumps(seen))
"""
)


def test_a_class_sent_again_loads_as_a_fresh_cloudpickle_payload(tmp_path):
    sent = tmp_path / "rows.pkl"
    run_python(_SENDER, str(sent), cwd=tmp_path)
    ours = json.loads(run_python(_RECEIVER, str(sent), "1", cwd=tmp_path))
    theirs = json.loads(run_python(_RECEIVER, str(sent), "0", cwd=tmp_path))
    assert ours == theirs
    # What cloudpickle gives, spelled out: the method reads the global the task
    # wrote, and the class attribute is the sender's in every task.
    assert theirs == [
        ["set by task 0", [0], "set by task 0"],
        ["set by task 1", [1], "set by task 1"],
        ["set by task 2", ["the sender's", 2], "set by task 2"],
        ["set by task 3", ["the sender's", 3], "set by task 3"],
    ]
