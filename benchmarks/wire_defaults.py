"""Honest traffic under the wire's default caps: does any message a benchmark
sends, or a compressed numpy array, get refused by a receiver that sets no
limit (``wire.MAX_DECOMPRESSED`` None: 64 MiB plus 64x the bytes received;
frames past 65,536 need 32 bytes received each)?

    .venv/bin/python benchmarks/wire_defaults.py [--scale 1.0]

Each message is packed without compression, with lz4 and with zstd, and
unpacked by ``wire.unpack_bytes`` with the defaults. The table goes to stdout
and to ``benchmarks/results/wire-defaults.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphpickle import BudgetExceededError, wire
from graphpickle.cli import workloads

RESULTS = Path(__file__).resolve().parent / "results" / "wire-defaults.md"


def messages(scale: float) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    found: dict[str, Any] = {
        w.name: w.build(workloads.inc, scale)
        for w in workloads.WORKLOADS
        if "dask" not in w.name or importlib.util.find_spec("dask") is not None
    }
    found.update(
        {
            "random float64, 8 MiB": rng.random(2**20),
            "arange int64, 8 MiB": np.arange(2**20),
            "small ints int64, 8 MiB": rng.integers(0, 100, 2**20),
            "1% nonzero float64, 64 MiB": np.where(rng.random(2**23) < 0.01, 1.0, 0.0),
            "bool, 8 MiB": rng.random(2**23) < 0.5,
            "zeros float64, 48 MiB": np.zeros(6 * 2**20),
            "zeros float64, 256 MiB": np.zeros(2**25),
        }
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="of the benchmark workloads")
    args = parser.parse_args()
    codecs = [None, *(c for c in ("lz4", "zstd") if importlib.util.find_spec(_module(c)))]
    lines = [
        "| message | compression | frames | received | decompressed | ratio | defaults |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, obj in messages(args.scale).items():
        for codec in codecs:
            frames = wire.pack(obj, compression=codec)
            message = b"".join(frames)
            raw = _decompressed(frames) if codec else len(message)
            try:
                wire.unpack_bytes(message)
                outcome = "loads"
            except BudgetExceededError as exc:
                outcome = f"refused ({exc.budget})"
            lines.append(
                f"| {name} | {codec or 'none'} | {len(frames) - 1:,} | {len(message):,} | "
                f"{raw:,} | {raw / len(message):,.1f}x | {outcome} |"
            )
            print(lines[-1], flush=True)
            del frames, message
    RESULTS.write_text(
        "# Honest messages under the wire's default caps\n\n"
        f"`.venv/bin/python benchmarks/wire_defaults.py --scale {args.scale}` "
        f"({time.strftime('%Y-%m-%d')}): `wire.unpack_bytes` with no `max_bytes` and "
        "`wire.MAX_DECOMPRESSED` unset (64 MiB plus 64x the bytes received).\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _module(codec: str) -> str:
    return "lz4" if codec == "lz4" else "zstandard"


def _decompressed(frames: list[Any]) -> int:
    """What the header's raw-length table declares, the pickle frame included."""
    header = wire._Header(frames[0])
    header.parse(frames[0])
    return sum(header.raw_lengths) + memoryview(frames[0]).nbytes


if __name__ == "__main__":
    main()
