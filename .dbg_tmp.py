import dataclasses, graphpickle, io
from graphpickle.core import reducers as R, captures, policy
from graphpickle.core import snapshots
from graphpickle import _cloudpickle_internals as cp
@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0
f = Point.__annotate__
names = cp.code_global_names(f.__code__)
snap = snapshots.function_snapshot(f, names, R._MISSING)
class State:
    globals_ref = {}
    deterministic = None
red = cp.reduce_function_by_value(State(), f)
print("warn", captures.warn_about_large_captures(f, red[2]))
print("decided", R._decided_by_snapshot(snap, f.__code__))
print("built_from", R._built_from(red, snap, names, None))
print("refers", R.refers_to((snap, red[2]), f))
print(red[2][1].keys())
print(f.__closure__[0].cell_contents)
