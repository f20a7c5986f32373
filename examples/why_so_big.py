"""A notebook-style graph whose functions capture more than they should.

.venv/bin/python examples/why_so_big.py            # prints graphpickle.explain(graph)
.venv/bin/python -m graphpickle inspect graph.pkl  # then reads the payload it wrote
"""

import warnings

import numpy as np

import graphpickle

lookup = np.random.default_rng(0).random(1_000_000)  # 8 MB, defined at top level
OFFSET = 3


def normalize(x):
    return (x - lookup.mean()) / lookup.std() + OFFSET


def make_scaler(factor):
    def scale(x):
        return normalize(x) * factor

    return scale


graph = {("task", i): (make_scaler(2) if i % 2 else normalize, i) for i in range(1_000)}
graph["summary"] = (lambda *xs: sum(xs), [("task", i) for i in range(1_000)])

if __name__ == "__main__":
    print(graphpickle.explain(graph))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = graphpickle.dumps(graph)
    for warning in caught:
        print(f"\n{warning.category.__name__}: {warning.message}")
    with open("graph.pkl", "wb") as f:
        f.write(data)
