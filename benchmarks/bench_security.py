"""Security benchmark: graphpickle's restricted loading and ``inspect`` against
picklescan and fickling, on an attack corpus and benign data.

    scripts/bench-security      # or: .venv/bin/python benchmarks/bench_security.py [--out FILE]

The corpus (``security_corpus.py``) is generated here from publicly documented
attack classes; its docstring names the sources followed. Every attack is first
loaded with plain ``pickle`` (the control) in a child interpreter under an audit
hook that stops its effect (``security_harness.py``): a control that does not
show the declared effect marks a broken sample. Then:

- **restricted blocked**: ``graphpickle.loads(data, allowed=DATA_ONLY)`` (a loop
  of ``graphpickle.load`` for files of several pickles) raised before the effect,
  the hook stopped nothing, and nothing changed;
- **inspect "code"**: ``graphpickle.inspect(data).verdict == "code"`` (what the
  CLI's exit status 1 means); "not data" counts "imports" too;
- **picklescan**: ``picklescan.scanner.scan_pickle_bytes`` found dangerous globals
  (``issues_count > 0``, what its CLI exits 1 for); a scan error without one is
  counted apart (its CLI exits 2);
- **fickling**: ``fickling.fickle.StackedPickle.load`` then, for each pickle,
  ``fickling.analysis.check_safety(pickle).severity > Severity.LIKELY_SAFE`` or
  an invalid opcode (what ``fickling.is_likely_safe`` and its CLI's
  ``--check-safety`` reject); a parse or analysis exception is counted apart.

Benign samples are loaded under ``DATA_ONLY`` and compared with the original;
a refusal, a different result or a tool's flag on one is a false alarm. Target:
restricted loading blocks 100%, ``inspect`` says "code" for 100%, no false
alarm from either. The table goes to stdout and, with the details (each miss by
name), to ``benchmarks/results/security.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from resource_attacks import CRASHERS, RESOURCE, WIRE, try_one
from security_corpus import CATEGORIES, Sample, attacks, benign
from security_harness import Outcome, run

import graphpickle

RESULTS = Path(__file__).resolve().parent / "results" / "security.md"


@dataclass(frozen=True)
class Scan:
    flagged: bool  # the tool's verdict: dangerous
    not_data: bool = False  # inspect only: any verdict but "data"
    error: str = ""  # the tool could not read it (and did not flag it)


def scan_inspect(data: bytes) -> Scan:
    try:
        report = graphpickle.inspect(data)
    except Exception as exc:  # the contract: no exception once an opcode was read
        before = getattr(exc, "report", None)  # complete pickles before unreadable bytes
        if before is None:
            return Scan(False, True, f"{type(exc).__name__}: {exc}")
        report = before  # (the CLI exits 2 and prints their report)
    code = report.verdict == "code"
    return Scan(
        code, report.verdict != "data", "" if code or report.error is None else report.error
    )


def scan_picklescan(data: bytes) -> Scan:
    from picklescan.scanner import scan_pickle_bytes

    result = scan_pickle_bytes(io.BytesIO(data), "sample")
    flagged = result.issues_count > 0
    return Scan(flagged, error="scan error" if result.scan_err and not flagged else "")


def scan_fickling(data: bytes) -> Scan:
    from fickling.analysis import Severity, check_safety
    from fickling.fickle import StackedPickle

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints parse warnings
            stacked = StackedPickle.load(io.BytesIO(data), fail_on_decode_error=False)
            flagged = any(
                p.has_invalid_opcode or check_safety(p).severity > Severity.LIKELY_SAFE
                for p in stacked
            )
    except Exception as exc:
        return Scan(False, error=f"{type(exc).__name__}: {exc}")
    return Scan(flagged)


SCANNERS: dict[str, Callable[[bytes], Scan]] = {
    "inspect": scan_inspect,
    "picklescan": scan_picklescan,
    "fickling": scan_fickling,
}
COLUMNS = (
    "category",
    "samples",
    "control shows the effect",
    "restricted loading blocks",
    'inspect says "code"',
    'inspect says not "data"',
    "picklescan flags",
    "fickling flags",
)


@dataclass
class Results:
    attacks: list[Sample]
    benign: list[Sample]
    control: dict[str, Outcome]
    restricted: dict[str, Outcome]
    loaded: dict[str, Outcome]  # benign samples under DATA_ONLY
    scans: dict[str, dict[str, Scan]]  # tool -> sample name -> scan
    resources: dict[tuple[str, str], dict[str, object]]  # (mode, name) -> outcome

    def broken(self) -> list[Sample]:
        return [s for s in self.attacks if not self.control[s.name].shows(s.effect)]

    def unblocked(self) -> list[Sample]:
        return [s for s in self.attacks if not self.restricted[s.name].blocked(s.effect)]

    def refused(self) -> list[Sample]:
        return [
            s
            for s in self.benign
            if self.loaded[s.name].outcome != "loaded" or not self.loaded[s.name].equal
        ]

    def missed(self, tool: str) -> list[Sample]:
        return [s for s in self.attacks if not self.scans[tool][s.name].flagged]

    def false_alarms(self, tool: str) -> list[Sample]:
        return [s for s in self.benign if self.scans[tool][s.name].flagged]


def measure(workers: int) -> Results:
    logging.getLogger("picklescan").setLevel(logging.CRITICAL)  # it logs every finding
    attack_samples, benign_samples = attacks(), benign()
    scans = {
        tool: {s.name: scan(s.data) for s in attack_samples + benign_samples}
        for tool, scan in SCANNERS.items()
    }
    return Results(
        attack_samples,
        benign_samples,
        run(attack_samples, "control", workers=workers),
        run(attack_samples, "restricted", workers=workers),
        run(benign_samples, "benign", workers=workers),
        scans,
        measure_resources(workers),
    )


def _count(samples: Sequence[Sample], hit: Callable[[Sample], bool]) -> str:
    return f"{sum(1 for s in samples if hit(s))}/{len(samples)}"


def _scanner_cell(r: Results, tool: str, samples: Sequence[Sample]) -> str:
    cell = _count(samples, lambda s: r.scans[tool][s.name].flagged)
    errors = sum(1 for s in samples if r.scans[tool][s.name].error)
    return f"{cell} (+{errors} err)" if errors else cell


def table(r: Results) -> str:
    rows = [COLUMNS, tuple("---" for _ in COLUMNS)]
    groups = [(c, [s for s in r.attacks if s.category == c]) for c in CATEGORIES[:-1]]
    groups.append(("**all attacks**", r.attacks))
    for category, samples in groups:
        rows.append(
            (
                category,
                str(len(samples)),
                _count(samples, lambda s: r.control[s.name].shows(s.effect)),
                _count(samples, lambda s: r.restricted[s.name].blocked(s.effect)),
                _count(samples, lambda s: r.scans["inspect"][s.name].flagged),
                _count(samples, lambda s: r.scans["inspect"][s.name].not_data),
                _scanner_cell(r, "picklescan", samples),
                _scanner_cell(r, "fickling", samples),
            )
        )
    rows.append(
        (
            "**benign: false alarms**",
            str(len(r.benign)),
            "-",
            f"{len(r.refused())} refused or changed",
            _count(r.benign, lambda s: r.scans["inspect"][s.name].flagged),
            _count(r.benign, lambda s: r.scans["inspect"][s.name].not_data),
            _scanner_cell(r, "picklescan", r.benign),
            _scanner_cell(r, "fickling", r.benign),
        )
    )
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


# -- resource attacks and states that crash later (resource_attacks.py) -----------------

RESOURCE_MODES = ("control", "restricted", "wire", "inspect", "picklescan", "fickling")
RESOURCE_GROUPS = (
    ("resource attacks", RESOURCE),
    ("states that crash later", CRASHERS),
    ("wire size lies", WIRE),
)
RESOURCE_COLUMNS = (
    "category",
    "samples",
    "plain pickle exhausted or crashed",
    "restricted loading refuses",
    "wire refuses",
    "inspect: not clean data",
    "picklescan flags",
    "fickling flags",
)


def measure_resources(workers: int) -> dict[tuple[str, str], dict[str, object]]:
    """Every sample of resource_attacks.py in every mode that applies, each in a
    child under RLIMIT_AS and RLIMIT_CPU: (mode, name) -> outcome and CPU."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [
        (mode, name)
        for _, group in RESOURCE_GROUPS
        for name in group
        for mode in (("wire",) if group is WIRE else RESOURCE_MODES)
    ]
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(jobs, pool.map(lambda job: try_one(*job), jobs), strict=True))


def _resource_hit(mode: str, result: dict[str, object]) -> bool:
    outcome = str(result["outcome"])
    cpu = result["cpu"]
    in_budget = isinstance(cpu, float) and cpu < 10
    if mode == "control":  # the attack is real
        return outcome.startswith(("died", "timeout", "MemoryError")) or not in_budget
    if mode in ("restricted", "wire"):
        return outcome.startswith("refused: ") and in_budget
    if mode == "inspect":
        # (a report in budget that does not pass as clean data: CLI status 1 or 3)
        return outcome != "verdict: data" and outcome.startswith(("verdict", "refused"))
    return outcome == "flagged"


def resource_table(results: dict[tuple[str, str], dict[str, object]]) -> str:
    rows = [RESOURCE_COLUMNS, tuple("---" for _ in RESOURCE_COLUMNS)]
    for category, group in RESOURCE_GROUPS:
        cells = [category, str(len(group))]
        for mode in RESOURCE_MODES:
            done = [
                results[(mode, name)]
                for name in group
                if (mode, name) in results
                and not str(results[(mode, name)]["outcome"]).startswith("not applicable")
            ]
            hits = sum(1 for result in done if _resource_hit(mode, result))
            cells.append(f"{hits}/{len(done)}" if done else "-")
        rows.append(tuple(cells))
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def resource_misses(results: dict[tuple[str, str], dict[str, object]]) -> list[str]:
    return [
        f"{mode}: {name} ({result['outcome']}; CPU {result['cpu']})"
        for (mode, name), result in results.items()
        if not _resource_hit(mode, result)
        and mode not in ("picklescan", "fickling")
        and not str(result["outcome"]).startswith("not applicable")
    ]


def targets_met(r: Results) -> bool:
    inspect_false = [s for s in r.benign if r.scans["inspect"][s.name].not_data]
    return not (
        r.broken()
        or r.unblocked()
        or r.missed("inspect")
        or r.refused()
        or inspect_false
        or resource_misses(r.resources)
    )


def _names(samples: Sequence[Sample], why: Callable[[Sample], str]) -> str:
    if not samples:
        return "none\n"
    return "".join(f"- {s.category}: {s.name}{why(s)}\n" for s in samples)


def report(r: Results, elapsed: float) -> str:
    versions = ", ".join(
        f"{name} {version(name)}"
        for name in ("graphpickle", "picklescan", "fickling", "cloudpickle", "numpy", "pandas")
    )
    restricted = r.restricted
    inspect_scans = r.scans["inspect"]
    parts = [
        "# Security benchmark: restricted loading and inspect vs picklescan and fickling\n",
        "`scripts/bench-security` (benchmarks/bench_security.py; the corpus is "
        "benchmarks/security_corpus.py, the harness benchmarks/security_harness.py). "
        f"Python {platform.python_version()}, {versions}; {elapsed:.0f} s on this machine.\n",
        table(r) + "\n",
        "How each column counts (see the module docstring for the exact APIs):\n",
        "- control: plain `pickle.loads` (a load loop for files of several pickles) in a "
        "child interpreter under an audit hook that stops the effect; the sample's "
        "declared effect (an audit event, a file opened for writing, an import, or a change "
        "to sys.path, sys.modules, builtins, copyreg or an allowed class or module) was seen;\n"
        "- restricted loading blocks: `graphpickle.loads(data, allowed=graphpickle.DATA_ONLY)` "
        "raised before any effect and nothing changed;\n"
        '- inspect: `graphpickle.inspect(data).verdict` is "code" (not "data": "imports" too);\n'
        "- picklescan: `scan_pickle_bytes` reports dangerous globals (`issues_count > 0`); "
        "err = a scan error without a finding;\n"
        "- fickling: `check_safety(...).severity > Severity.LIKELY_SAFE` or an invalid opcode, "
        "for any pickle of `StackedPickle.load(...)`; err = the parser or the analysis raised;\n"
        "- benign: loaded under DATA_ONLY and compared with the original object; a flag on "
        "a benign sample is a false alarm.\n",
        "## Resource attacks, states that crash later, wire size lies\n",
        "Generated by benchmarks/resource_attacks.py (its docstring names the public "
        "classes followed). Each sample runs in a child interpreter under `RLIMIT_AS` "
        "(256 MB above its baseline) and `RLIMIT_CPU` (10 s). Plain pickle: the child died, "
        "ran out of memory or of CPU (the attack is real). Restricted loading and the "
        "wire (`wire.unpack(..., allowed=DATA_ONLY)` of an unsigned message): a clear "
        "`UnpicklingError` within the limits. inspect: a verdict that fails the default "
        "gate or reports the payload malformed (`graphpickle inspect` exits 1 or 3). A crasher's object is used after loading (`repr`, `==`, a copy, "
        "`np.asarray`, a round trip).\n",
        resource_table(r.resources) + "\n",
        "Misses of plain pickle (a broken sample), restricted loading, the wire and inspect:\n",
        "".join(f"- {line}\n" for line in resource_misses(r.resources)) or "none\n",
        "## Attacks restricted loading did not block\n",
        _names(r.unblocked(), lambda s: f" ({_outcome(restricted[s.name])})"),
        '## Attacks inspect did not call "code"\n',
        _names(r.missed("inspect"), lambda s: f" ({_scan_words(inspect_scans[s.name])})"),
        "## Attacks picklescan missed\n",
        _names(r.missed("picklescan"), lambda s: _error(r.scans["picklescan"][s.name])),
        "## Attacks fickling missed\n",
        _names(r.missed("fickling"), lambda s: _error(r.scans["fickling"][s.name])),
        "## Benign samples restricted loading refused or changed\n",
        _names(r.refused(), lambda s: f" ({_outcome(r.loaded[s.name])})"),
        '## Benign samples inspect did not call "data"\n',
        _names(
            [s for s in r.benign if inspect_scans[s.name].not_data],
            lambda s: f" ({_scan_words(inspect_scans[s.name])})",
        ),
        "## Broken samples (the control did not show the effect)\n",
        _names(r.broken(), lambda s: f" (wanted {s.effect}; {_outcome(r.control[s.name])})"),
        "## Sources\n",
        "The attack classes follow public documentation and reports, not copied samples: "
        "the `pickle` and `pickletools` documentation and CPython's audit events table; "
        "picklescan's, fickling's and modelscan's documentation and issue trackers (their "
        "dangerous-global lists and reported bypasses); public write-ups on bypassing "
        "`find_class` allow-lists (attribute traversal, BUILD on allowed objects, "
        "`operator`/`functools` chains, gadgets such as `cProfile.run`, `timeit.timeit`, "
        "`pdb.run`, `numpy.testing` `runstring` and `numpy.load(allow_pickle=True)`). "
        "Every payload is generated by benchmarks/security_corpus.py.\n",
    ]
    return "\n".join(parts)


def _outcome(o: Outcome) -> str:
    words = o.outcome + (f" {o.error}: {o.message}" if o.error else "")
    if o.stopped:
        words += f"; stopped {', '.join(o.stopped)}"
    if o.changed:
        words += f"; changed {', '.join(o.changed)}"
    if o.equal is False:
        words += "; not equal to the original"
    return words


def _scan_words(scan: Scan) -> str:
    return ("not data" if scan.not_data else "data") + (f"; {scan.error}" if scan.error else "")


def _error(scan: Scan) -> str:
    return f" ({scan.error})" if scan.error else ""


def main() -> int:
    import time

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results file ({RESULTS})")
    parser.add_argument("--workers", type=int, default=2, help="child interpreters at a time (2)")
    args = parser.parse_args()
    start = time.perf_counter()
    results = measure(args.workers)
    elapsed = time.perf_counter() - start
    print(table(results))
    print()
    print(resource_table(results.resources))
    met = targets_met(results)
    print(
        f"\n{len(results.attacks)} attacks, {len(results.benign)} benign samples, {elapsed:.0f} s; "
        f"targets (restricted blocks all, inspect says code for all, no false alarm, every "
        f"control shows its effect): {'met' if met else 'NOT MET'}; details in {args.out}"
    )
    args.out.write_text(report(results, elapsed))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
