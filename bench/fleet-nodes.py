#!/usr/bin/env python3
"""`check --node` given a cluster's nodes, paired against one node profile: 5,000 nodes as
`kubectl get nodes -o json` prints them (examples/fleet/nodes.json's pools, each node with its
labels, conditions and image list), three node types, against a profile of one MI300X node;
each round in a fresh random order (posix_spawn to exit), the median of the rounds' ratios with
its IQR, each one's median time; then each one's peak memory, as GNU time (`/usr/bin/time -f
%M`, a small parent: a child spawned from this process would count this process's memory as
its own) reports it, over 5 runs.
    bench/fleet-nodes.py BINARY IMAGE_ROOT OVERLAY [ROUNDS] [NODES]
e.g. with the quickstart's image root and the stand-in overlay (examples/stage-standin-overlay)."""
import json
import os
import random
import statistics
import sys
import tempfile
import time

bin_, root, ov = sys.argv[1:4]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 50
count = int(sys.argv[5]) if len(sys.argv) > 5 else 5000
here = os.path.dirname(os.path.abspath(__file__))
fleet = json.load(open(os.path.join(here, "..", "examples", "fleet", "nodes.json")))
pools = [n for n in fleet["items"] if "amd.com/gpu" in n["status"]["allocatable"]]
items = []
for i in range(count):
    n = json.loads(json.dumps(pools[i % len(pools)]))
    n["metadata"]["name"] = f"gpu-{i:05}"
    n["metadata"]["labels"]["kubernetes.io/hostname"] = f"gpu-{i:05}"
    items.append(n)
work = tempfile.mkdtemp()
nodes = os.path.join(work, "nodes.json")
json.dump({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}, open(nodes, "w"), indent=4)
gpu = lambda i: {"node": i + 1, "gfx": "gfx942", "device_id": "74a1", "render_minor": 128 + i, "vram": 206141652992,
                 "compute_partition": "SPX", "memory_partition": "NPS1"}
profile = os.path.join(work, "node.json")
json.dump({"schema_version": 2, "source": "this node (/)", "name": "gpu-00000", "product": "AMD Instinct MI300X",
           "gpus": [gpu(i) for i in range(8)], "driver_loaded": True, "driver": "6.10.5", "kernel": "6.8.0",
           "numa_balancing": 0, "host_memory": 2164189224960, "rdma_devices": [],
           "pod": {"shm": None, "memory": None, "source": ""}, "findings": []}, open(profile, "w"))
base = [bin_, "check", "--root", root, "--overlay", ov, "--shm-size", "16Gi"]
tail = ["--", "--model", "/models/kimi-k3"]
cases = {"one profile": base + ["--node", profile] + tail, f"{count} nodes": base + ["--node", nodes] + tail}
null = os.open(os.devnull, os.O_WRONLY)


def run(a):
    t = time.perf_counter()
    pid = os.posix_spawn(a[0], a, dict(os.environ), file_actions=[(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)])
    os.waitpid(pid, 0)
    return time.perf_counter() - t


def peak(a):
    """KiB, as GNU time's %M gives the child's maximum resident set."""
    import subprocess
    out = subprocess.run(["/usr/bin/time", "-f", "%M"] + a, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return int(out.stderr.strip().splitlines()[-1])


times = {k: [] for k in cases}
for _ in range(rounds):
    for k in random.sample(list(cases), len(cases)):
        times[k].append(run(cases[k]))
rss = {k: [peak(cases[k]) for _ in range(5)] for k in cases}
a, b = list(cases)
r = sorted(x / y for x, y in zip(times[b], times[a]))
q = lambda p: r[int(p * (len(r) - 1))]
print(f"{os.path.getsize(nodes) >> 20} MiB of nodes ({count}), a profile of {os.path.getsize(profile)} bytes; {rounds} rounds")
for k in cases:
    print(f"{k}: {statistics.median(times[k]) * 1e3:.1f} ms (min {min(times[k]) * 1e3:.1f}, max {max(times[k]) * 1e3:.1f}), "
          f"peak {statistics.median(rss[k]) / 1024:.1f} MiB")
print(f"{b} / {a}: {statistics.median(r):.2f}x (IQR {q(.25):.2f}-{q(.75):.2f})")
