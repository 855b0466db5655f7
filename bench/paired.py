"""Paired, interleaved timing of process starts.

Each round runs every command once, in a freshly shuffled order, timing spawn-to-exit with
posix_spawn + waitpid. Drift of a shared machine (other tenants, CPU frequency, page cache)
then hits every command of a round alike, and ratios are taken within a round (the pairs)
before their median is taken: the median of launcher/direct over rounds, not the ratio of
two medians measured minutes apart.

    paired.py SPEC.json ROUNDS OUT.json

SPEC: {"commands": {name: {"argv": [...], "env": {...}}}, "warmup": N}
OUT:  {"medians": {name: seconds}, "pairs": {"a/b": median ratio, "a/b iqr": [its quartiles],
       "a-b": median difference}}
"""

import json
import os
import random
import statistics
import sys
import time


def run_once(argv, env):
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, devnull, 0),
                (os.POSIX_SPAWN_DUP2, devnull, 1),
                (os.POSIX_SPAWN_DUP2, devnull, 2),
            ],
        )
        _, status = os.waitpid(pid, 0)
        t1 = time.perf_counter_ns()
    finally:
        os.close(devnull)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{argv[0]} exited {code}: {' '.join(argv)}")
    return (t1 - t0) / 1e9


def main():
    spec = json.load(open(sys.argv[1]))
    rounds = int(sys.argv[2])
    cmds = spec["commands"]
    names = list(cmds)
    rng = random.Random(1234)
    for _ in range(spec.get("warmup", 5)):
        for n in names:
            run_once(cmds[n]["argv"], cmds[n]["env"])
    times = {n: [] for n in names}
    for _ in range(rounds):
        order = names[:]
        rng.shuffle(order)
        for n in order:
            times[n].append(run_once(cmds[n]["argv"], cmds[n]["env"]))
    pairs = {}
    for a, b in spec.get("pairs", []):
        ratios = [x / y for x, y in zip(times[a], times[b])]
        pairs[f"{a}/{b}"] = statistics.median(ratios)
        q = statistics.quantiles(ratios, n=4)
        pairs[f"{a}/{b} iqr"] = [q[0], q[2]]
        pairs[f"{a}-{b}"] = statistics.median(x - y for x, y in zip(times[a], times[b]))
    out = {
        "rounds": rounds,
        "medians": {n: statistics.median(t) for n, t in times.items()},
        "pairs": pairs,
    }
    json.dump(out, open(sys.argv[3], "w"), indent=1)


if __name__ == "__main__":
    main()
