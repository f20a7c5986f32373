"""Property 9: many threads pickling at once all get correct results."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import graphpickle


def make_graph(seed: int):
    offset = seed * 1000

    def shift(x):
        return x + offset

    class Box:
        def __init__(self, v):
            self.v = v

    graph = {("t", seed, i): (shift, Box(i), np.full(3, seed)) for i in range(200)}
    expected = {k: (offset + box.v, arr.tolist()) for k, (f, box, arr) in graph.items()}
    return graph, expected


def check(seed: int) -> bool:
    graph, expected = make_graph(seed)
    for _ in range(5):
        buffers: list[pickle.PickleBuffer] = []
        data = graphpickle.dumps(graph, buffer_callback=buffers.append)
        loaded = graphpickle.loads(data, buffers=buffers)
        got = {k: (f(box.v), arr.tolist()) for k, (f, box, arr) in loaded.items()}
        if got != expected:
            return False
    return True


def test_concurrent_dumps_and_loads():
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(check, range(64)))
    assert all(results)


def test_concurrent_picklers_with_private_reducers_do_not_interfere():
    class Special:
        def __init__(self, n):
            self.n = n

    def run(n: int) -> int:
        reducers = {Special: lambda obj, n=n: (int, (n,))}
        import io

        out = io.BytesIO()
        graphpickle.Pickler(out, reducers=reducers).dump([Special(0)] * 10)
        return sum(graphpickle.loads(out.getvalue()))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, range(100)))
    assert results == [10 * n for n in range(100)]
