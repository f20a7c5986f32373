"""``graphpickle bench``'s command-line options, apart from the benchmark
itself: building ``graphpickle``'s parser (for every command) imports no
benchmark, which would import distributed."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``graphpickle bench``'s options to ``parser``."""
    parser.add_argument("--quick", action="store_true", help="1/20 of the sizes, in seconds")
    parser.add_argument("--repeat", type=int, default=None, help="samples per measurement")
    parser.add_argument("--only", help="only workloads whose name contains this text")
    parser.add_argument("--json", type=Path, help="write rows, summary and metadata as JSON")
    parser.add_argument("--plot", type=Path, help="write a bar chart of the ratios (PNG)")
    parser.add_argument("--markdown", action="store_true", help="print the README's table")
