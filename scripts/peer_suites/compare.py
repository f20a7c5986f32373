"""Compare the two junit files of a peer suite: stock, then with graphpickle.

Prints each run's totals and the tests that fail only with graphpickle (a test
missing from that run counts: its run died or did not collect it). Exit status 1
if there is any, 2 if a run left no readable junit file or a test module of
either run did not collect (an import error in both runs would otherwise compare
as equal, with none of the module's tests run).

A test that upstream marks as an expected failure and that passes is an
"xpassed" outcome, listed apart, not a failure, even under ``xfail_strict``
(pytest reports it as one): the behaviour it asserts holds, and upstream's mark
records a bug of its own stack (dask marks the tokens of equal local classes,
cloudpickle#453, which graphpickle's content-hashed class ids fix).
"""

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def outcomes(path):
    """{test id: passed | failed | skipped | xfailed | xpassed} from a pytest junit file."""
    result = {}
    for case in ET.parse(path).iter("testcase"):
        tags = {child.tag: child for child in case}
        if "failure" in tags and tags["failure"].get("message", "").startswith("[XPASS(strict)]"):
            outcome = "xpassed"
        elif "failure" in tags or "error" in tags:
            outcome = "failed"
        elif "skipped" in tags:
            # pytest writes an xfail as <skipped type="pytest.xfail">.
            outcome = "xfailed" if tags["skipped"].get("type") == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        result[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return result


def uncollected(path):
    """The test modules pytest could not collect, from a junit file."""
    return sorted(
        f"{case.get('classname')}.{case.get('name')}".lstrip(".")
        for case in ET.parse(path).iter("testcase")
        for child in case
        if child.tag == "error" and child.get("message") == "collection failure"
    )


def main(stock_xml, graphpickle_xml):
    runs = {}
    for label, path in (("stock", stock_xml), ("graphpickle", graphpickle_xml)):
        try:
            runs[label] = outcomes(path)
            broken = uncollected(path)
        except (OSError, ET.ParseError) as exc:
            print(f"  {label}: no result, the run died ({exc}); see its log")
            return 2
        if broken:
            print(f"  {label}: no result, not collected: {', '.join(broken)}; see its log")
            return 2
        counts = Counter(runs[label].values())
        totals = ", ".join(
            f"{counts[k]} {k}"
            for k in ("passed", "failed", "skipped", "xfailed", "xpassed")
            if counts[k]
        )
        print(f"  {label + ':':13}{totals}")
    stock, gp = runs["stock"], runs["graphpickle"]
    gp_only = sorted(
        t
        for t in stock.keys() | gp.keys()
        if gp.get(t, "missing") in ("failed", "missing") and stock.get(t) != "failed"
    )
    stock_only = sorted(t for t, v in stock.items() if v == "failed" and gp.get(t) != "failed")
    print(f"  failing only with graphpickle: {len(gp_only)}")
    for t in gp_only:
        print(f"    {t} ({gp.get(t, 'missing')})")
    if stock_only:
        print(f"  failing only without graphpickle: {len(stock_only)}")
        for t in stock_only:
            print(f"    {t}")
    xpassed = sorted(t for t, v in gp.items() if v == "xpassed" and stock.get(t) != "xpassed")
    if xpassed:
        print(f"  expected by upstream to fail, passing with graphpickle: {len(xpassed)}")
        for t in xpassed:
            print(f"    {t}")
    return 1 if gp_only else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
