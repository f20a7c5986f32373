"""The one-pass pickler: the C pickler with one hook, and the policy behind it.

- ``policy``: whether the receiver can import an object (by reference) or not
  (by value), and why.
- ``reducers``: how each kind of object is reduced, the per-type table the hook
  looks up, and the caches of by-value reductions.
- ``pickler``: ``Pickler``, ``dump(s)``, ``load(s)``, and their C stand-ins.
- ``locate`` and ``walk``: the path in the graph of an object that fails.
- ``captures``: warnings about large values a by-value function captures.
- ``stack``: deep graphs pickled on a thread with a larger stack.
- ``overrun``: the malformed pickle that crashes CPython's C unpickler, refused.
- ``fingerprint``: content hashes of deterministic payloads.

Error paths and capture warnings are made here, while the pickler runs;
``graphpickle.diagnostics`` holds the tools that ask about a graph before it
is sent (``explain``, ``inspect``).
"""
