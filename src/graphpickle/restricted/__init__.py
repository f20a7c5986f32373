"""Restricted loading: ``loads(data, allowed=...)`` imports nothing outside the
allow-list and changes nothing outside the objects the payload creates.

- ``unpickler``: the checked unpickler and the allow-list's compiled form.
- ``data_only``: ``DATA_ONLY``, the exact names plain data needs.
- ``data_checks``: type-specific checks (numpy dtypes, pandas blocks, ...).

The threat model is in ``docs/security.md``. ``graphpickle.wire`` loads with it
when given ``allowed=``, and ``inspect`` uses its allow-list.
"""
