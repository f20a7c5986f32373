"""The version of this graphpickle (the wire header records it)."""

__version__ = "0.1.0.dev0"
