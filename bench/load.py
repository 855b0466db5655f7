"""bench/load's checkpoint writer and loaders.

    load.py write DIR GIB      real safetensors shards of 1 GiB (float16 tensors of mixed sizes)
    load.py read DIR HOW       load the checkpoint as vLLM's default (lazy) path does, after
                               IMPORT seconds (the engine's imports; default 2), HOW being:
      lazy                     the loader alone (the engine's default)
      vllm                     with a STAND-IN of vLLM 0.18's `--safetensors-load-strategy
                               prefetch` beside it (sorted shards, 16 MiB blocks, 8 threads),
                               started with the load as vLLM starts it
      ours                     with the launcher's own read-ahead (`infera-exec __prefetch`),
                               started with the process as the launcher starts it before the
                               exec; PREFETCH_ARGS are its options (--lead, --ranges, ...)
Prints the seconds to the last tensor and to the first one, from the process's start.
"""

import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

BLOCK = 16 << 20
THREADS = 8


def write(d, gib):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    sizes = [48 << 20, 24 << 20, 12 << 20, 6 << 20]  # bytes per tensor, in turn
    for shard in range(gib):
        tensors, used, i = {}, 0, 0
        while used < (1 << 30) - (48 << 20):
            n = sizes[i % len(sizes)]
            tensors[f"model.layers.{shard}.t{i}"] = rng.integers(0, 1 << 15, n // 2, dtype=np.uint16).view(np.float16)
            used += n
            i += 1
        save_file(tensors, os.path.join(d, f"model-{shard + 1:05d}-of-{gib:05d}.safetensors"))


def shards(d):
    """The files in vLLM's order (`_natural_sort_key`)."""
    key = lambda s: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
    return sorted((os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors")), key=key)


def vllm_prefetch(files):
    """A stand-in of vLLM's prefetch: THREADS readers over the sorted files' 16 MiB blocks."""
    blocks = [(f, off) for f in files for off in range(0, os.path.getsize(f), BLOCK)]
    lock, nxt = threading.Lock(), [0]

    def reader():
        while True:
            with lock:
                if nxt[0] >= len(blocks):
                    return
                f, off = blocks[nxt[0]]
                nxt[0] += 1
            with open(f, "rb", buffering=0) as h:
                h.seek(off)
                h.read(BLOCK)

    for _ in range(THREADS):
        threading.Thread(target=reader, daemon=True).start()


def read(d, how):
    t0 = time.perf_counter()
    files = shards(d)
    if how == "ours":
        exe = os.environ["INFERA_EXEC"]
        args = os.environ.get("PREFETCH_ARGS", "").split()
        subprocess.Popen([exe, "__prefetch", "--parent", str(os.getpid()), "--linger", *args, "--", *files],
                         stdout=subprocess.DEVNULL)
    time.sleep(float(os.environ.get("IMPORT", "2")))
    if how == "vllm":
        vllm_prefetch(files)
    first = None
    total = 0
    for f in files:
        with safe_open(f, framework="np") as s:
            for k in s.keys():
                total += int(s.get_tensor(k).view(np.uint16)[::4096].sum() & 1)  # touch every page-ish
                first = first or time.perf_counter() - t0
    print(f"{time.perf_counter() - t0:.2f} {first:.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]))
    else:
        read(sys.argv[2], sys.argv[3])
