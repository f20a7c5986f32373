"""Only the optional C extension lives here; all other metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # The C version of Pickler.reducer_override. Optional: if it cannot be
        # compiled, graphpickle runs the same logic in Python, with the same output.
        Extension("graphpickle._speedups", ["src/graphpickle/_speedups.c"], optional=True),
    ]
)
