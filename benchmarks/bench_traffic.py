"""Real traffic: what a LocalCluster's scheduler and workers pickle, recorded and replayed.

    scripts/bench-traffic record     # run the workloads on a LocalCluster, keep a sample
    scripts/bench-traffic replay     # time the sample with each serializer

``record`` runs a dask.array, a dask.delayed and a client.map workload, each with
an importable function, a function of ``__main__`` and a lambda, on a local
cluster whose scheduler and workers note every object they hand to
``distributed.protocol.pickle.dumps`` (stock distributed). It keeps up to
``--per-kind`` of them per kind of message (who pickled it, what it is, whether
it holds something by value), with how many of each kind were sent and how many
tasks ran, in ``benchmarks/data/traffic.pkl`` (a graphpickle payload: it loads on
the Python minor version that recorded it).

``replay`` pickles every kept message with pickle, stock distributed,
cloudpickle, graphpickle and graphpickle's dask ``dumps`` (medians of
interleaved runs), and reports per kind the median time per message, the ratios
to stock distributed, and the CPU a scheduler would spend pickling per 100,000
tasks (each kind's median times its count). Writes
``benchmarks/results/traffic.md``.
"""

from __future__ import annotations

import argparse
import collections
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import graphpickle

HERE = Path(__file__).parent
SAMPLE = HERE / "data" / "traffic.pkl"
RESULTS = HERE / "results" / "traffic.md"


def inc_main(x, *args):
    """The task function, defined in __main__ as a notebook defines it."""
    return x + 1


def start_recording(dask_worker=None, dask_scheduler=None):
    """Run in the scheduler and in each worker: note what dumps is given."""
    import sys

    import distributed.protocol.pickle as protocol_pickle

    import graphpickle as gp

    # distributed passes the server it runs in as both arguments.
    role = "scheduler" if type(dask_scheduler).__name__ == "Scheduler" else "worker"
    original = protocol_pickle.dumps
    if getattr(original, "_gp_recording", False):
        return
    notes = protocol_pickle._gp_notes = []

    def recording_dumps(x, *args, **kwargs):
        result = original(x, *args, **kwargs)
        try:
            kept = gp.dumps(x)
        except Exception:
            kept = None  # not picklable without the stock fallbacks: not kept
        notes.append((role, _kind_of(x), b"cloudpickle" in result, kept))
        return result

    def _kind_of(x):
        kind = type(x).__qualname__
        if kind in ("tuple", "list", "dict") and x:
            first = next(iter(x.values())) if isinstance(x, dict) else x[0]
            kind += f" of {type(first).__qualname__}"
        return kind

    recording_dumps._gp_recording = True
    # distributed.protocol.pickle, and the modules that imported dumps by name.
    from graphpickle.integrations.dask_distributed import _TARGETS

    for module_name, name in _TARGETS:
        module = sys.modules.get(module_name)
        if name == "dumps" and module is not None and vars(module).get(name) is original:
            module.dumps = recording_dumps


def collect_notes(dask_worker=None, dask_scheduler=None):
    import distributed.protocol.pickle as protocol_pickle

    notes = getattr(protocol_pickle, "_gp_notes", [])
    taken = list(notes)
    notes.clear()
    return taken


def workloads(client, functions):
    """Run each workload with each function; return the number of tasks run."""
    import dask
    import dask.array as da

    tasks = 0
    for name, func in functions.items():
        x = da.ones((600, 600), chunks=(20, 20)).map_blocks(func, dtype=float)
        total = x.sum()
        tasks += len(total.__dask_graph__())
        total.compute()
        leaves = [dask.delayed(func, pure=False)(i) for i in range(300)]
        summed = dask.delayed(sum)(leaves)
        tasks += len(summed.__dask_graph__())
        summed.compute()
        futures = client.map(func, range(500), key=[f"map-{name}-{i}" for i in range(500)])
        client.gather(futures)
        tasks += len(futures)
        del futures
    return tasks


def record(per_kind: int, workers: int) -> None:
    from distributed import Client, LocalCluster

    from graphpickle.cli.workloads import inc

    functions = {"importable": inc, "__main__": inc_main, "lambda": lambda x, *a: x + 1}
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run_on_scheduler(start_recording)
        client.run(start_recording)
        tasks = workloads(client, functions)
        notes = client.run_on_scheduler(collect_notes)
        for worker_notes in client.run(collect_notes).values():
            notes.extend(worker_notes)
    counts: collections.Counter[tuple[str, str, bool]] = collections.Counter()
    kept: dict[tuple[str, str, bool], list[bytes]] = collections.defaultdict(list)
    for role, kind, by_value, payload in notes:
        key = (role, kind, by_value)
        counts[key] += 1
        if payload is not None and len(kept[key]) < per_kind:
            kept[key].append(payload)
    SAMPLE.parent.mkdir(exist_ok=True)
    document = {
        "python": platform.python_version(),
        "tasks": tasks,
        "counts": dict(counts),
        "messages": dict(kept),
    }
    SAMPLE.write_bytes(graphpickle.dumps(document))
    print(f"recorded {sum(counts.values()):,} messages of {len(counts)} kinds for {tasks:,} tasks")
    for (role, kind, by_value), count in sorted(counts.items()):
        print(f"  {role:9s} {kind:32s} {'by value' if by_value else '':8s} {count:6,}")


def replay(repeat: int) -> int:
    from graphpickle.cli.bench import interleaved_medians, message_dumps

    document = graphpickle.loads(SAMPLE.read_bytes())
    dumpers = message_dumps()
    rows = []
    for key, payloads in sorted(document["messages"].items()):
        role, kind, by_value = key
        per_lib: dict[str, list[float]] = collections.defaultdict(list)
        failed: set[str] = set()
        for payload in payloads:
            message = graphpickle.loads(payload)
            calls = {}
            for lib, dumps in dumpers.items():
                try:
                    dumps(message)
                    dumps(message)
                except Exception:
                    failed.add(lib)
                    continue
                calls[lib] = lambda dumps=dumps, message=message: dumps(message)
            for lib, seconds in interleaved_medians(calls, repeat, min_seconds=0.002).items():
                per_lib[lib].append(seconds)
        medians = {lib: statistics.median(v) for lib, v in per_lib.items() if lib not in failed}
        rows.append((role, kind, by_value, document["counts"][key], len(payloads), medians))
    text = render(rows, document)
    RESULTS.write_text(text + "\n")
    print(text)
    return 0


def render(rows: list[Any], document: dict[str, Any]) -> str:
    libs = ["pickle", "distributed", "cloudpickle", "graphpickle", "graphpickle dask"]
    lines = [
        f"Recorded on a LocalCluster ({document['tasks']:,} tasks: dask.array, dask.delayed "
        "and client.map, each with an importable function, a __main__ function and a "
        f"lambda; CPython {document['python']}), replayed here with medians of interleaved "
        "runs: median time per message of each kind, and ratios to stock distributed.",
        "",
        "| who | message | holds | sent | kept | " + " | ".join(libs) + " |",
        "|---|---|---|---|---|" + "---|" * len(libs),
    ]
    totals = dict.fromkeys(libs, 0.0)
    complete = dict.fromkeys(libs, True)
    for role, kind, by_value, count, kept, medians in rows:
        stock = medians["distributed"]
        cells = []
        for lib in libs:
            if lib not in medians:
                cells.append("fails")
                complete[lib] &= role != "scheduler"
                continue
            if lib == "distributed":
                cells.append(f"{stock * 1e6:.1f} µs")
            else:
                cells.append(f"{medians[lib] / stock:.2f}x")
            if role == "scheduler":
                totals[lib] += medians[lib] * count
        holds = "by value" if by_value else "by reference"
        lines.append(
            f"| {role} | {kind} | {holds} | {count:,} | {kept} | " + " | ".join(cells) + " |"
        )
    per_100k = 100_000 / document["tasks"]
    lines += [
        "",
        "CPU a scheduler spends in dumps per 100,000 tasks (each kind's median x its count):",
        "",
    ]
    for lib in libs:
        if complete[lib]:
            ratio = totals[lib] / totals["distributed"]
            lines.append(
                f"- {lib}: {totals[lib] * per_100k:.2f} s ({ratio:.2f}x stock distributed)"
            )
        else:
            lines.append(f"- {lib}: fails on some of the scheduler's messages")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="record a LocalCluster's traffic")
    rec.add_argument("--per-kind", type=int, default=40, help="messages kept per kind (40)")
    rec.add_argument("--workers", type=int, default=2)
    rep = commands.add_parser("replay", help="replay the recorded sample")
    rep.add_argument("--repeat", type=int, default=7, help="samples per message (7)")
    args = parser.parse_args()
    if args.command == "record":
        record(args.per_kind, args.workers)
        return 0
    return replay(args.repeat)


if __name__ == "__main__":
    sys.exit(main())
