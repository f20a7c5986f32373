"""Switches read from the environment once, when graphpickle is imported."""

from __future__ import annotations

import os

#: ``GRAPHPICKLE_NO_CACHE=1`` turns off every cache that lasts from one payload
#: to the next: remembered by-value function and code reductions (deterministic
#: payloads' code cache too), the C hook's answers for functions and classes
#: found importable before, the per-type tables shared between picklers and the
#: pools of ready picklers (docs/performance.md lists them).
CACHING = not os.environ.get("GRAPHPICKLE_NO_CACHE")

#: ``GRAPHPICKLE_HELD_CLASSES=0`` stops a worker from reusing the objects it made
#: from a task's classes' part while nothing they are made of changed
#: (``core/held_classes.py``): each part is then loaded with its task. On by
#: default since the fifteenth hostile review found no way a reused part differs
#: from a fresh load (docs/performance.md, "What the worker reuses", lists what
#: each review found; all of it is closed).
HELD_CLASSES = os.environ.get("GRAPHPICKLE_HELD_CLASSES") != "0"

#: ``GRAPHPICKLE_NO_REFCOUNT=1`` makes restricted loading stop reading reference
#: counts to tell an object a call made from one that existed before (see
#: ``restricted/unpickler.py``): every object a call returns is then treated as
#: existing before the load, and may not be changed (pickles that BUILD what a
#: call made, as pandas' and many classes' do, are refused). It is what happens
#: anyway on an interpreter whose counts do not pass the check made at import.
READ_REFCOUNTS = not os.environ.get("GRAPHPICKLE_NO_REFCOUNT")
