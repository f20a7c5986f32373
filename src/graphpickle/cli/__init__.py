"""The ``graphpickle`` command: ``demo``, ``bench``, ``inspect``.

The library never imports this package (``tests/test_layout.py`` checks); the
benchmarks in ``benchmarks/`` share its timing helpers.
"""
