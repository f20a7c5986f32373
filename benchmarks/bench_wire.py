"""What the wire envelope costs over dumps/loads, and what signing costs over HMAC.

    scripts/bench-wire            # or: .venv/bin/python benchmarks/bench_wire.py [--quick]

Workloads: 1,000 numpy arrays of 1 MB (out of band) and 1,000,000 tuple tasks.
Medians of --repeat samples; each sample repeats a call until it lasts 50 ms, and
the two calls of a pair take turns (in alternating order) within each repeat.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import pickle
from typing import Any

from graphpickle import dumps, loads, wire
from graphpickle.cli import workloads
from graphpickle.cli.bench import paired_medians

KEY = b"benchmark key"


def measure(name: str, graph: Any, repeat: int) -> list[tuple[str, float, float, float]]:
    buffers: list[pickle.PickleBuffer] = []
    payload = dumps(graph, buffer_callback=buffers.append)
    frames = wire.pack(graph)
    signed = wire.pack(graph, key=KEY)
    message = wire.pack_bytes(graph)

    def dumps_with_buffers() -> None:
        dumps(graph, buffer_callback=[].append)

    def hmac_alone() -> None:
        mac = hmac.new(KEY, digestmod=hashlib.sha256)
        for frame in frames:
            mac.update(frame)
        mac.digest()

    pairs = [
        ("pack / dumps", lambda: wire.pack(graph), dumps_with_buffers),
        ("unpack / loads", lambda: wire.unpack(frames), lambda: loads(payload, buffers=buffers)),
        (
            "unpack_bytes / loads",
            lambda: wire.unpack_bytes(message),
            lambda: loads(payload, buffers=buffers),
        ),
        (
            "verify+unpack / hmac+loads",
            lambda: wire.unpack(signed, key=KEY),
            lambda: (hmac_alone(), loads(payload, buffers=buffers)),
        ),
        (
            "sign+pack / hmac+pack",
            lambda: wire.pack(graph, key=KEY),
            lambda: (hmac_alone(), wire.pack(graph)),
        ),
    ]
    rows = []
    for label, ours, reference in pairs:
        a, b = paired_medians(ours, reference, repeat)
        rows.append((f"{name}: {label}", a, b, a / b))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/20 of the sizes")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    scale = 0.05 if args.quick else 1.0
    rows = []
    rows += measure("1000 x 1 MB numpy", workloads.numpy_arrays(workloads.inc, scale), args.repeat)
    rows += measure("1M tuple tasks", workloads.tuple_tasks(workloads.inc, scale), args.repeat)
    print("| measurement | wire | reference | ratio |")
    print("|---|---|---|---|")
    for label, ours, reference, ratio in rows:
        print(f"| {label} | {ours * 1e3:.2f} ms | {reference * 1e3:.2f} ms | {ratio:.3f}x |")


if __name__ == "__main__":
    main()
