"""Switches read from the environment once, when graphpickle is imported."""

from __future__ import annotations

import os

#: ``GRAPHPICKLE_NO_CACHE=1`` turns off every cache that lasts from one payload
#: to the next: remembered by-value function and code reductions (deterministic
#: payloads' code cache too), and the C hook's answers for functions and
#: classes found importable before.
CACHING = not os.environ.get("GRAPHPICKLE_NO_CACHE")
