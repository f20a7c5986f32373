"""Admitted types keep their invariants: a pickled state whose codes, positions,
lengths or flags were changed either is refused, or gives an object that can
be used without crashing the process (data_checks.py).

Each mutated payload is loaded with ``allowed=DATA_ONLY`` in a child
interpreter that then uses the object (``repr``, ``==``, a copy,
``np.asarray``, a pickle round trip). A child that dies is a failure, and the
payload that killed it is named.
"""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

OBJECTS = {
    "Categorical": pd.Categorical(np.arange(300) % 200),  # int16 codes
    "Categorical of strings": pd.Categorical(["a", "b", "a", "c"]),
    "IntegerArray": pd.array([1, None, 3, 4], dtype="Int64"),
    "BooleanArray": pd.array([True, None, False], dtype="boolean"),
    "SparseArray": pd.arrays.SparseArray([0, 0, 1, 2, 0, 3]),
    "DataFrame of them": pd.DataFrame(
        {
            "c": pd.Categorical(["x", "y", "x"]),
            "i": pd.array([1, None, 3], dtype="Int64"),
            "s": pd.arrays.SparseArray([0, 1, 0]),
        }
    ),
    "numpy array": np.arange(12, dtype="i4").reshape(3, 4),
}

CHILD = textwrap.dedent(
    """
    import base64, copy, faulthandler, json, pickle, sys
    import numpy as np
    import graphpickle
    faulthandler.enable()
    outcomes = []
    for line in sys.stdin:
        data = base64.b64decode(line)
        print(json.dumps({"trying": line.strip()}), file=sys.stderr, flush=True)
        try:
            obj = graphpickle.loads(data, allowed=graphpickle.DATA_ONLY)
        except Exception:
            outcomes.append("refused")
            continue
        for use in (repr, lambda o: o == o, copy.copy, np.asarray,
                    lambda o: pickle.loads(pickle.dumps(o))):
            try:
                use(obj)
            except Exception:
                pass
        outcomes.append("loaded")
    print(json.dumps(outcomes))
    """
)


def _arrays_in(obj: object) -> list[np.ndarray]:
    """The numpy arrays an object keeps its codes, positions, masks and values in."""
    found = []
    for attribute in ("_codes", "_data", "_mask", "sp_values", "_ndarray"):
        value = getattr(obj, attribute, None)
        if isinstance(value, np.ndarray):
            found.append(value)
    index = getattr(obj, "sp_index", None)
    if index is not None:
        found.append(index.to_int_index().indices)
    if isinstance(obj, pd.DataFrame):
        for column in obj:
            found.extend(_arrays_in(obj[column].array))
    if isinstance(obj, np.ndarray):
        found.append(obj)
    return found


def _regions(payload: bytes, obj: object) -> list[range]:
    """Where those arrays' bytes sit in the payload (written in band)."""
    regions = []
    for array in _arrays_in(obj):
        raw = np.ascontiguousarray(array).tobytes()
        at = payload.find(raw) if raw else -1
        if at >= 0:
            regions.append(range(at, at + len(raw)))
    return regions


def _mutations(data: bytes, draws: list[tuple[int, bytes]]) -> list[bytes]:
    return [data[:at] + new + data[at + len(new) :] for at, new in draws]


def _run_child(payloads: list[bytes]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input="\n".join(base64.b64encode(p).decode() for p in payloads) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        tried = [
            json.loads(line)["trying"] for line in done.stderr.splitlines() if line.startswith("{")
        ]
        culprit = tried[-1] if tried else "?"
        pytest.fail(
            f"the child died ({done.returncode}) on the payload {culprit}:\n{done.stderr[-1500:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


# An integer of each width that points far outside (a code, a position, a length).
_FAR = st.sampled_from(
    [b"\x7f", b"\xff", b"\x80", b"\xff\x7f", b"\x00\x80", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80",
     b"\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x00", b"\x01", b"\x02"]
)  # fmt: skip


@pytest.mark.parametrize("name", list(OBJECTS))
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_changed_states_are_refused_or_safe_to_use(name, data):
    payload = pickle.dumps(OBJECTS[name], 5)
    regions = _regions(payload, OBJECTS[name])
    assert regions, "the arrays' bytes were not found in the payload"
    # Most changes inside the codes, positions, masks and values; some anywhere
    # (counts, lengths, flags and dtypes in the state around them).
    inside = st.sampled_from(regions).flatmap(lambda r: st.integers(r.start, r.stop - 1))
    anywhere = st.integers(2, len(payload) - 2)
    draws = data.draw(
        st.lists(st.tuples(st.one_of(inside, inside, anywhere), _FAR), min_size=150, max_size=150)
    )
    outcomes = _run_child(_mutations(payload, draws))
    assert len(outcomes) == len(draws)
    assert "loaded" in outcomes or "refused" in outcomes


def test_out_of_range_codes_are_refused():
    import graphpickle
    from graphpickle import DATA_ONLY, ForbiddenGlobalError

    frame = pd.DataFrame({"c": pd.Categorical([10, 20, 10])})
    payload = pickle.dumps(frame, 5)
    at = payload.find(b"\x00\x01\x00")
    bad = payload[:at] + b"\x00\x7f\x00" + payload[at + 3 :]
    with pytest.raises(ForbiddenGlobalError, match="codes past its categories"):
        graphpickle.loads(bad, allowed=DATA_ONLY)
    assert graphpickle.loads(payload, allowed=DATA_ONLY).equals(frame)
