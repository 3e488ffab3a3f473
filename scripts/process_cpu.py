"""CPU seconds of every program a command ran, from Linux process accounting (BSD acct v3).

    apt-get install acct                    # Debian: accton, sa
    touch /tmp/acct && accton /tmp/acct     # root: every process that ends is recorded
    make test; accton off
    python scripts/process_cpu.py /tmp/acct [--root make] [--top 25]

Unlike scripts/test_times.py (the CPU of the children each test reaped) this sees every process,
also the daemons a test never waits for (Flower's SuperLink, SuperNodes and the ClientApps they
start). The tree is rebuilt from the records' parent ids, starting at the longest-lived process
named `--root`; processes whose parent ended first were handed to init and are listed apart.
A program is shown by its name at exit: pytest workers often end up as "tf_graph_runner" (a
TensorFlow thread renames the process), PlatformIO and SCons as "python".
"""
from __future__ import annotations

import argparse
import struct
from collections import Counter, defaultdict

_RECORD = struct.Struct("<BBHIIIIIIf8H16s")   # struct acct_v3 (linux/acct.h), 64 bytes
_AHZ = 100                                    # comp_t ticks per second


def _comp(c: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (c & 0x1FFF) << (3 * ((c >> 13) & 7))


def read(path: str) -> list[dict]:
    data = open(path, "rb").read()
    out = []
    for i in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        f = _RECORD.unpack_from(data, i)
        if f[1] != 3:
            raise SystemExit(f"{path}: record {i // _RECORD.size} is not acct v3 (version {f[1]})")
        out.append({"pid": f[6], "ppid": f[7], "btime": f[8], "etime": f[9],
                    "cpu": (_comp(f[10]) + _comp(f[11])) / _AHZ,
                    "comm": f[18].split(b"\0")[0].decode(errors="replace")})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("acct")
    ap.add_argument("--root", default="make", help="name of the process whose tree is counted")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    recs = read(a.acct)
    roots = [r for r in recs if r["comm"] == a.root]
    if not roots:
        raise SystemExit(f"no process named {a.root!r} in {a.acct}")
    root = max(roots, key=lambda r: r["etime"])
    children = defaultdict(list)
    for r in recs:
        children[r["ppid"]].append(r)
    tree, todo, seen = [], [root["pid"]], set()
    while todo:
        for c in children[todo.pop()]:
            if c["pid"] not in seen:
                seen.add(c["pid"])
                tree.append(c)
                todo.append(c["pid"])
    cpu, count = Counter(), Counter()
    for r in tree:
        cpu[r["comm"]] += r["cpu"]
        count[r["comm"]] += 1
    print(f"{a.root} (pid {root['pid']}): {len(tree)} processes, {sum(cpu.values()):.0f} CPU s")
    print(f"{'CPU s':>8} {'runs':>6}  program")
    for name, s in cpu.most_common(a.top):
        print(f"{s:8.1f} {count[name]:6d}  {name}")
    orphans = Counter()
    for r in recs:
        if r["ppid"] == 1 and r["btime"] >= root["btime"] and r["pid"] not in seen:
            orphans[r["comm"]] += r["cpu"]
    if orphans:
        print(f"handed to init (parent ended first; may include other users' jobs): "
              f"{sum(orphans.values()):.0f} CPU s: "
              + ", ".join(f"{n} {s:.1f}" for n, s in orphans.most_common(6)))


if __name__ == "__main__":
    main()
