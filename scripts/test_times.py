"""Where the test suite's time goes, from a TINYOL_TEST_TIMES file (tests/conftest.py).

    TINYOL_TEST_TIMES=build/times.jsonl make test
    python scripts/test_times.py build/times.jsonl [--top 25]

Per file: tests, wall seconds (setup + call + teardown, summed), CPU seconds of the test
process and of the children it reaped (builds, emulators, tinyol subprocesses). On a
shared machine wall time moves with the load; CPU time much less.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("times")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    files: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    tests = []
    with open(a.times) as f:
        for line in f:
            r = json.loads(line)
            path = r["id"].split("::")[0]
            row = files[path]
            row[0] += 1
            row[1] += r["wall"]
            row[2] += r["cpu"]
            row[3] += r["children"]
            tests.append((r["wall"], r["cpu"] + r["children"], r["id"]))
    total = [sum(r[i] for r in files.values()) for i in range(4)]
    print(f"{'file':48} {'tests':>5} {'wall s':>8} {'cpu s':>8} {'child s':>8}")
    for path, (n, wall, cpu, ch) in sorted(files.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"{path:48} {n:5d} {wall:8.1f} {cpu:8.1f} {ch:8.1f}")
    print(f"{'all ' + str(len(files)) + ' files':48} {int(total[0]):5d} {total[1]:8.1f} {total[2]:8.1f} {total[3]:8.1f}")
    print(f"\nslowest tests (wall s, cpu s):")
    for wall, cpu, nodeid in sorted(tests, reverse=True)[:a.top]:
        print(f"  {wall:7.1f} {cpu:7.1f}  {nodeid}")


if __name__ == "__main__":
    main()
