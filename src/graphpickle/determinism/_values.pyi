"""The C part of ``values.py``."""

VERSION: int

def canonical_values(data: bytes, /) -> bytes: ...
