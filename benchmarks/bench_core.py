"""The core benchmark: graphpickle against pickle, cloudpickle and distributed.

The suite lives in the package (graphpickle/_bench.py, workloads in
graphpickle/_bench_workloads.py) so that `graphpickle bench` runs it anywhere;
this script is the same command from a checkout:

    scripts/bench --quick
    scripts/bench --repeat 7 --json benchmarks/results/core.json --markdown
"""

import sys

from graphpickle.cli.bench import main

if __name__ == "__main__":
    sys.exit(main())
