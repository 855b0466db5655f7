"""STAND-IN reporter shared by the stand-in engine and server modules.

Prints one line `INFERA-STANDIN {json}` with what the process received: argv (also as
hex bytes, so non-UTF-8 arguments can be compared exactly), the environment the
launcher sets, sys.path, and where each capability module imported from.
"""
import importlib
import importlib.util
import json
import os
import signal
import sys
import time

WATCHED_ENV = (
    "PYTHONPATH", "LD_LIBRARY_PATH", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX",
    "INFERA_TREE", "INFERA_TREE_FAMILY", "MC_FORCE_TCP", "HIP_VISIBLE_DEVICES",
)


def _imports():
    out = {}
    for name in ("mooncake", "hipfile", "kvd"):
        try:
            mod = importlib.import_module(name)
            out[name] = {"ok": True, "file": getattr(mod, "__file__", None)}
        except Exception as e:  # report, never fail: the report is the point
            out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    return out


def _load(d):
    import mmap
    import re

    key = lambda s: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
    total = 0
    for name in sorted((n for n in os.listdir(d) if n.endswith(".safetensors")), key=key):
        with open(os.path.join(d, name), "rb") as f:
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                for i in range(0, len(m), 4096):
                    m[i]  # every page read through the mapping
                total += len(m)
    return total


def _children():
    me, out = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open("/proc/%s/stat" % pid).read()
            cmdline = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me:
            out.append({"pid": int(pid), "state": fields[0], "argv": [a.decode("utf-8", "replace") for a in cmdline if a]})
    return out


def main(module):
    report = {
        "standin": module,
        "pid": os.getpid(),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "executable": sys.executable,
        "python": "%d.%d" % sys.version_info[:2],
        # Lossy text for reading; argv_hex is exact.
        "argv": [os.fsencode(a).decode("utf-8", "replace") for a in sys.argv[1:]],
        "argv_hex": [os.fsencode(a).hex() for a in sys.argv[1:]],
        "env": {k: os.environ[k] for k in WATCHED_ENV if k in os.environ},
        "sys_path": sys.path,
        "imports": _imports(),
        # The payload must be read-only where it is mounted (image volume / readOnly mount).
        "tree_writable": os.access(os.environ.get("INFERA_TREE", "/nonexistent"), os.W_OK),
    }
    # Knobs for init-mode tests.
    # INFERA_STANDIN_ORPHANS=N: leave N grandchildren behind (double fork), like leaked workers.
    for _ in range(int(os.environ.get("INFERA_STANDIN_ORPHANS", "0"))):
        if os.fork() == 0:
            if os.fork() == 0:
                time.sleep(0.2)
            os._exit(0)
        os.wait()
    # INFERA_STANDIN_WAIT=SECONDS: stay up until a signal; with INFERA_STANDIN_SIGNALS=default
    # the signal's default action applies (so SIGTERM kills), else it is reported and handled.
    got = []
    if os.environ.get("INFERA_STANDIN_WAIT") and os.environ.get("INFERA_STANDIN_SIGNALS") != "default":

        def on_signal(signum, _frame):
            # Record only: printing here could re-enter a print the signal interrupted.
            got.append(signum)

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(s, on_signal)
    with open("/proc/self/status") as f:
        status = {l.split(":")[0]: l.split()[1] for l in f if ":" in l and len(l.split()) > 1}
    report["sig"] = {k: status[k] for k in ("SigBlk", "SigIgn") if k in status}
    report["status"] = {k: status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs") if k in status}
    # The whole process as the launcher left it, to compare with its dry-run plan.
    report["environ"] = {os.fsencode(k).decode("utf-8", "replace"): os.fsencode(v).decode("utf-8", "replace") for k, v in os.environ.items()}
    report["cwd"] = os.getcwd()
    # Engine patches leave a marker beside the engine package (found without importing it).
    report["patched"] = {}
    for engine in ("vllm", "sglang"):
        try:
            spec = importlib.util.find_spec(engine)
        except Exception:  # a shadowing checkout can make this raise; report, never fail
            spec = None
        if spec is not None and spec.submodule_search_locations:
            marker = os.path.join(list(spec.submodule_search_locations)[0], ".infera-standin-patched")
            report["patched"][engine] = open(marker).read().splitlines() if os.path.exists(marker) else []
    # Where the packages a working directory could shadow resolve from.
    report["origins"] = {}
    for name in ("infera", "vllm", "sglang"):
        try:
            spec = importlib.util.find_spec(name)
        except Exception as e:
            report["origins"][name] = f"error: {e}"
            continue
        if spec is not None:
            report["origins"][name] = spec.origin or list(spec.submodule_search_locations or [])
    # Where each provider libibverbs would load first (RDMAV_DRIVERS) resolves to.
    report["rdma_drivers"] = {
        d: {
            str(n): {"realpath": os.path.realpath(d + "-rdmav%s.so" % n), "size": os.path.getsize(d + "-rdmav%s.so" % n)}
            for n in (34, 65)
            if os.path.exists(d + "-rdmav%s.so" % n)
        }
        for d in os.environ.get("RDMAV_DRIVERS", "").replace(";", ":").split(":")
        if d
    }
    # INFERA_STANDIN_LOAD=DIR: read DIR's *.safetensors as vLLM's loader does (natural order,
    # each file mapped and read through), before reporting.
    if os.environ.get("INFERA_STANDIN_LOAD"):
        report["loaded"] = _load(os.environ["INFERA_STANDIN_LOAD"])
    # The processes this one has as children (the launcher's read-ahead, started before the exec).
    report["children"] = _children()
    report["ppid"] = os.getppid()
    report["pgid"] = os.getpgid(0)
    print("INFERA-STANDIN " + json.dumps(report, sort_keys=True), flush=True)
    if os.environ.get("INFERA_STANDIN_WAIT"):
        deadline = time.time() + float(os.environ["INFERA_STANDIN_WAIT"])
        while not got and time.time() < deadline:
            time.sleep(0.05)
        for signum in got:
            print("INFERA-STANDIN-SIGNAL %d" % signum, flush=True)
    sys.exit(int(os.environ.get("INFERA_STANDIN_EXIT", "0")))
