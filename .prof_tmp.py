import cProfile, pstats, graphpickle, dataclasses, time, pickle
import graphpickle.integrations.dask_distributed as gpd
from dask._task_spec import Task
from operator import add
@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0
    def norm(self):
        return abs(self.x) + abs(self.y)
def blocks(obj):
    tok = gpd._CODE_BLOCKS.set(True)
    try: return gpd.dumps(obj)
    finally: gpd._CODE_BLOCKS.reset(tok)
ts = [Task(f"k{i}", add, Point(i, 2.0), 1) for i in range(3000)]
blocks(ts[0])
t0=time.perf_counter(); ds=[blocks(t) for t in ts]; t1=time.perf_counter()
print("dumps us", (t1-t0)/3000*1e6)
t0=time.perf_counter(); [gpd.loads(d) for d in ds]; t1=time.perf_counter()
print("loads us", (t1-t0)/3000*1e6)
cProfile.run("[blocks(t) for t in ts]", "/tmp/d.prof")
pstats.Stats("/tmp/d.prof").sort_stats("tottime").print_stats(14)


