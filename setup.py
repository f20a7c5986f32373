"""Only the optional C extensions live here; all other metadata is in pyproject.toml.

Each extension sits beside the Python it accelerates, which gives the same
output and runs when it cannot be compiled (``optional=True``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # The pickler's hook, dumps/loads for small messages, remembered reductions.
        Extension("graphpickle.core._speedups", ["src/graphpickle/core/_speedups.c"], optional=True),
        # The wire's frame sizes.
        Extension("graphpickle.wire._frames", ["src/graphpickle/wire/_frames.c"], optional=True),
        # Where a deterministic dump's payload writes sets.
        Extension("graphpickle.determinism._sets", ["src/graphpickle/determinism/_sets.c"], optional=True),
        # Each equal value written once: the last stage of deterministic dumps.
        Extension("graphpickle.determinism._values", ["src/graphpickle/determinism/_values.c"], optional=True),
    ]
)
