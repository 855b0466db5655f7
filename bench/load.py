"""bench/load's checkpoint writer and runner: the real launcher, chrooted into a standalone
image root as a pod runs it, timed from its process's start to the engine's last tensor.

    load.py write DIR GIB        a checkpoint of GIB shards of 1 GiB (safetensors, float16
                                 tensors of 48, 24, 12 and 6 MiB in turn) and a config.json
    load.py run                  the cells and rounds the environment names (bench/load sets it)

Each run: `unshare` a mount, PID and network namespace; mount /proc, /sys, /dev, the model
directory at /models and the overlay read-only at /opt/infera in the root; join the cell's
cgroups (the blkio throttle, the pod's memory limit); `chroot` and exec

    off / auto / on   /opt/infera/bin/infera-exec python3 -m infera.engine.vllm --model /models/ckpt …
                      with INFERA_PREFETCH set: the launcher, the real Infera wrapper, the
                      stand-in vLLM whose load is vLLM's lazy safetensors path
                      (examples/standin/engines: STANDIN_LOAD_WEIGHTS=1)
    alone             python3.12 -m vllm.entrypoints.cli.main serve --model /models …: the same
                      engine with the command line and environment it gets in the pod (the
                      launcher's planned environment and added options, read from its dry run
                      in the same root; the wrapper's --kv-events-config), no launcher and no
                      wrapper in front of it

The time is from the `unshare` to the engine's `STANDIN-LOADED` line (its clock), the
checkpoint's pages dropped from the cache before each run; the whole namespace is killed after.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import time

SIZES = [48 << 20, 24 << 20, 12 << 20, 6 << 20]
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_attention_heads": 32,
          "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 32, "torch_dtype": "float16"}


def write(d, gib):
    os.makedirs(d, exist_ok=True)
    for shard in range(gib):
        header, at, names = {}, 0, []
        i = 0
        while at < (1 << 30) - (48 << 20):
            n = SIZES[i % len(SIZES)]
            name = f"model.layers.{shard}.t{i:04d}"
            header[name] = {"dtype": "F16", "shape": [n // 2], "data_offsets": [at, at + n]}
            names.append((name, n))
            at += n
            i += 1
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)
        with open(os.path.join(d, f"model-{shard + 1:05d}-of-{gib:05d}.safetensors"), "wb") as f:
            f.write(len(head).to_bytes(8, "little") + head)
            for _, n in names:
                f.write(os.urandom(n))
    weight_map = {f"t{i}": f"model-{s + 1:05d}-of-{gib:05d}.safetensors" for i, s in enumerate(range(gib))}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": gib << 30}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f)


INROOT = r'''
set -e
R=$1; MODELS=$2; OVERLAY=$3; CGS=$4; shift 4
mount --make-rprivate /
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mkdir -p "$R/models" "$R/opt/infera"
mount --bind "$MODELS" "$R/models"
mount --bind "$OVERLAY" "$R/opt/infera" && mount -o remount,bind,ro "$R/opt/infera"
ip link set lo up
for c in $CGS; do echo $$ > "$c/cgroup.procs"; done
exec chroot "$R" "$@"
'''

WRAPPER = ["--discovery-backend", "etcd", "--etcd-endpoint", "127.0.0.1:1",
           "--request-transport", "http", "--kv-event-transport", "zmq"]


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


POD_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "STANDIN_LOAD_WEIGHTS": "1", "HF_HUB_OFFLINE": "1"}
LAUNCHER = ["/opt/infera/bin/infera-exec", "python3", "-m", "infera.engine.vllm", "--model", "/models", *WRAPPER]
# What infera.engine.vllm adds for --kv-event-transport zmq (its port is random per run; one is
# fixed here, of the same length).
KV_EVENTS = '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:54299", "topic": "kv-events"}'


def engine_alone(root, models, overlay):
    """The engine's command and environment as it runs in the pod: the launcher's dry run in
    the same root gives the environment it execs the wrapper with (which hands it on whole)
    and the options it adds. The stand-in loader's page faults read in pieces whose size
    depends on the process's own command line and environment (BENCHMARKS.md), so the loader
    alone runs with exactly those."""
    env = dict(POD_ENV, INFERA_PREFETCH="off")
    p = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--net", "sh", "-c", INROOT, "inroot", root, models,
                        overlay, "", *LAUNCHER[:1], "--dry-run", "--output", "json", *LAUNCHER[1:]],
                       env=env, capture_output=True, text=True, check=True)
    x = json.loads(p.stdout)["exec"]
    engine = [x["program"], "-m", "vllm.entrypoints.cli.main", "serve", "--model", "/models", *x["added_args"],
              "--kv-events-config", KV_EVENTS]
    return engine, {k: v for k, v in x["env"].items() if k != "PWD"}


def run_one(root, models, overlay, cgroups, variant, alone, timeout=600):
    """Seconds from the start to the engine's last tensor."""
    if variant == "alone":
        argv, env = alone
    else:
        argv, env = LAUNCHER, dict(POD_ENV, INFERA_PREFETCH=variant)
    env = dict(env, INFERA_LOG=os.environ.get("INFERA_LOG", "info"))
    drop_caches()
    started = time.time()
    p = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--net", "sh", "-c", INROOT, "inroot",
                          root, models, overlay, " ".join(cgroups), *argv],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True)
    log = []
    loaded = loading = None
    deadline = started + timeout
    try:
        for line in p.stdout:
            log.append(line)
            if line.startswith("STANDIN-LOADING "):
                loading = float(line.split()[1])
            if line.startswith("STANDIN-LOADED "):
                loaded = float(line.split()[1])
                break
            if time.time() > deadline:
                break
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    if loaded is None:
        raise SystemExit(f"bench/load: {variant} never loaded:\n{''.join(log[-40:])}")
    log.append(f"the load itself: {loaded - (loading or started):.2f} s, after {(loading or started) - started:.2f} s\n")
    return loaded - started, "".join(log)


def reads(io):
    """The reads the throttled device served in the blkio cgroup so far (requests, bytes)."""
    total = lambda f: sum(int(l.split()[2]) for l in open(os.path.join(io, f)) if l.split()[1:2] == ["Read"])
    return total("blkio.throttle.io_serviced"), total("blkio.throttle.io_service_bytes")


def table(results, real_bytes, rate):
    """results: {(storage, memory): {variant: [seconds per round]}} — paired by round. The
    storage's rate share: the checkpoint's real bytes over the cell's bandwidth, divided by the
    time from the process's start."""
    med = statistics.median
    rng = lambda v: f"{med(v):.1f} s ({min(v):.1f}–{max(v):.1f})"
    print("| storage, memory | the loader alone (no launcher, no wrapper) | `--prefetch off` | `--prefetch auto` "
          "(the default) | `--prefetch on` | auto: gain over the loader alone | on: gain over the loader alone "
          "| auto: gain over off | on: gain over off | auto at the storage's rate |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (s, m), v in results.items():
        ratios = lambda base, x: [a / b for a, b in zip(v[base], v[x])]
        gain = lambda x, base="alone": f"{med(ratios(base, x)):.2f}× ({min(ratios(base, x)):.2f}–{max(ratios(base, x)):.2f})"
        shares = [real_bytes / rate[s] / t * 100 for t in v["auto"]] if s in rate else []
        share = f"{med(shares):.0f} % ({min(shares):.0f}–{max(shares):.0f})" if shares else "–"
        print(f"| {s}, {m} | {rng(v['alone'])} | {rng(v['off'])} | {rng(v['auto'])} | {rng(v['on'])} "
              f"| {gain('auto')} | {gain('on')} | {gain('auto', 'off')} | {gain('on', 'off')} | {share} |")


def run():
    e = os.environ
    root, overlay = e["ROOT"], e["OVERLAY"]
    storages = {"throttled": e["THROTTLED"], "fuse": e["FUSE"], "local": e["LOCAL"]}
    io, mem, limit = e["IO_CGROUP"], e["MEM_CGROUP"], int(e["LIMIT"])
    # An even number of rounds: the order is reversed every other round, so each variant runs as
    # often in each place of it (on this machine's disk the runs of a round get faster along it,
    # whatever they run: BENCHMARKS.md).
    rounds = int(e.get("REPEAT", "6"))
    variants = e.get("VARIANTS", "off auto on alone").split()
    cells = [c.split(",") for c in e.get("CELLS", "throttled,fits throttled,2x fuse,fits fuse,2x local,fits").split()]
    results = {tuple(c): {v: [] for v in variants} for c in cells}
    logs = open(os.path.join(e["OUT"], "runs.log"), "w")
    alone = engine_alone(root, storages["local"], overlay)
    logs.write(f"the loader alone: {' '.join(alone[0])}\n  with {alone[1]}\n")
    for r in range(rounds):
        for storage, memory in cells:
            cgs = [io] if storage == "throttled" else []
            with open(os.path.join(mem, "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit if memory == "2x" else -1))
            cgs.append(mem)
            order = variants if r % 2 == 0 else variants[::-1]
            for v in order:
                before = reads(io)
                secs, log = run_one(root, storages[storage], overlay, cgs, v, alone)
                if storage == "throttled":
                    (n, b), (n0, b0) = reads(io), before
                    log += f"the device served {n - n0} reads, {b - b0} bytes ({(b - b0) / max(n - n0, 1) / 1024:.0f} KiB each)\n"
                kills = [l for l in open(os.path.join(mem, "memory.oom_control")) if l.startswith("oom_kill ")]
                if kills and kills[0].split()[1] != "0":
                    raise SystemExit(f"bench/load: an OOM kill in the pod's cgroup ({storage} {memory} {v})")
                results[(storage, memory)][v].append(secs)
                print(f"round {r + 1}: {storage} {memory} {v}: {secs:.2f} s", file=sys.stderr, flush=True)
                logs.write(f"==== round {r + 1} {storage} {memory} {v}: {secs:.2f} s\n{log}\n")
    with open(os.path.join(e["OUT"], "results.json"), "w") as f:
        json.dump({f"{s},{m}": v for (s, m), v in results.items()}, f)
    if all(v in variants for v in ("off", "auto", "on", "alone")):
        ck = storages["local"]
        real = sum(os.path.getsize(os.path.join(ck, f)) for f in os.listdir(ck) if f.endswith(".safetensors"))
        table(results, real, {"throttled": 300e6, "fuse": 300e6})


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]))
    else:
        run()
