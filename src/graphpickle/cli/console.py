"""Tables and progress bars for the command line: rich when it is installed
(``pip install graphpickle[cli]``), plain text otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_rich: Any
try:
    import rich.console
    import rich.progress
    import rich.table

    _rich = rich
except ImportError:  # pragma: no cover - exercised where rich is absent
    _rich = None


def print_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    rows = [[str(cell) for cell in row] for row in rows]
    if _rich is not None:
        table = rich.table.Table(title=title, title_justify="left")
        for i, header in enumerate(headers):
            table.add_column(header, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        console = rich.console.Console()
        if not console.is_terminal:
            console = rich.console.Console(width=160)  # piped: do not wrap at 80
        console.print(table)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(title)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def progress(items: Iterable[T], total: int, label: str) -> Iterator[T]:
    """Yield ``items`` while showing a progress bar on standard error when it is a
    terminal; the bar is erased when done. Elsewhere (piped, redirected to a file)
    nothing is written: no bar, no blank line."""
    if not _stderr_is_terminal():
        yield from items
        return
    if _rich is not None:
        yield from rich.progress.track(
            items, total=total, description=f"{label:>12}", console=_stderr(), transient=True
        )
        return
    line = ""
    try:
        for done, item in enumerate(items, 1):
            yield item
            filled = 30 * done // max(total, 1)
            line = f"\r{label:>12} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}"
            print(line, end="", file=sys.stderr, flush=True)
    finally:
        print("\r" + " " * len(line) + "\r", end="", file=sys.stderr, flush=True)


def _stderr_is_terminal() -> bool:
    stream = sys.stderr
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _stderr() -> Any:
    return rich.console.Console(stderr=True)
