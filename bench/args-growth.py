#!/usr/bin/env python3
"""The dry run's growth with the engine args, paired: 500 unknown options (`--opt-N N`, refused
at the first as vLLM's parser would) and 500 known ones (`--max-num-seqs N` repeated) against
the base args, each round in a fresh random order (posix_spawn to exit), the median of the
rounds' ratios and its IQR.
    bench/args-growth.py BINARY IMAGE_ROOT OVERLAY [ROUNDS]
e.g. with the quickstart's image root and the stand-in overlay (examples/stage-standin-overlay)."""
import os
import random
import statistics
import sys
import time

bin_, root, ov = sys.argv[1:4]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 200
base = ["--model", "/models/kimi-k3", "--served-model-name", "kimi-k3", "--max-num-seqs", "128", "--request-transport", "http", "--kv-event-transport", "zmq"]
cases = {
    "base": base,
    "500 unknown options": base + [x for i in range(250) for x in (f"--opt-{i}", str(i))],
    "500 known options": base + [x for i in range(250) for x in ("--max-num-seqs", str(i + 1))],
}
argv = {k: [bin_, "worker", "--dry-run", "-o", "json", "--root", root, "--overlay", ov, "--"] + a for k, a in cases.items()}
env = dict(os.environ, INFERA_GPUS="8")
null = os.open(os.devnull, os.O_WRONLY)


def run(a):
    t = time.perf_counter()
    pid = os.posix_spawn(a[0], a, env, file_actions=[(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)])
    os.waitpid(pid, 0)
    return time.perf_counter() - t


times = {k: [] for k in cases}
for _ in range(rounds):
    for k in random.sample(list(cases), len(cases)):
        times[k].append(run(argv[k]))
for k in list(cases)[1:]:
    r = sorted(a / b for a, b in zip(times[k], times["base"]))
    q = lambda p: r[int(p * (len(r) - 1))]
    print(f"{k} / base: {statistics.median(r):.3f}x (IQR {q(.25):.3f}-{q(.75):.3f}); "
          f"base {statistics.median(times['base']) * 1e3:.2f} ms, {statistics.median(times[k]) * 1e3:.2f} ms")
