#!/usr/bin/env python3
"""The real Infera stack, end to end through infera-exec, on one machine (no GPU, no cluster).

REAL: etcd (Debian's etcd-server) and NATS with JetStream (nats-server); the router
`python -m infera.server` and the workers `python -m infera.engine.vllm|sglang` from the Infera
sources (the overlay's trees, built by scripts/build-infera-trees with their real dependencies);
infera-exec as each container's command, in engine image roots (examples/make-image-root
--standalone) entered with chroot in a mount namespace — the overlay read-only at /opt/infera,
the models at /models, as a pod mounts them; CPython 3.12 and 3.10.
STAND-IN: the engines (examples/standin/engines: the real parsers' recorded options, /health,
the OpenAI routes, /metrics, multi-node rendezvous). Mooncake/hipFile are not exercised.

Everything runs in a network namespace of its own: loopback and one pod address, 10.244.0.10
(LeaderWorkerSet leader addresses are refused when loopback), so nothing clashes with the host.

    tests/stack/e2e.py LAUNCHER WORKDIR

Prints `ok: ...` per check and `e2e: all checks passed` at the end; exit 0 only then.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POD_IP = "10.244.0.10"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VENV_PATH = "/opt/venv/bin:" + PATH
DISCOVERY = ["--discovery-backend", "etcd", "--etcd-endpoint", f"{POD_IP}:2379",
             "--request-transport", "http", "--kv-event-transport", "zmq"]
procs: list[tuple[str, subprocess.Popen]] = []
failures: list[str] = []


def log(msg: str) -> None:
    print(msg, flush=True)


def check(cond: bool, what: str, detail: str = "") -> bool:
    if cond:
        log(f"ok: {what}")
    else:
        log(f"FAIL: {what}" + (f"\n{detail}" if detail else ""))
        failures.append(what)
    return cond


def sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"e2e: `{' '.join(cmd)}` failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def http(url: str, body: dict | None = None, timeout: float = 10) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def wait_for(what: str, pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 - a probe that fails is "not yet"
            pass
        time.sleep(0.5)
    return False


def logtail(path: str, n: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return str(e)


# --- the machine: network namespace, services, image roots ------------------------------------


def network() -> None:
    # The pod address on the namespace's own loopback device (no dummy/veth module needed).
    sh("ip", "addr", "add", f"{POD_IP}/32", "dev", "lo")
    sh("ip", "link", "set", "lo", "up")


def service(name: str, cmd: list[str], work: str) -> subprocess.Popen:
    out = open(os.path.join(work, f"{name}.log"), "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    procs.append((name, p))
    return p


def image_root(kind: str, work: str, hosts: list[str]) -> str:
    root = os.path.join(work, kind)
    sh(os.path.join(REPO, "examples/make-image-root"), "--standalone", kind, root)
    with open(os.path.join(root, "etc/hosts"), "w") as f:  # what the cluster DNS would answer
        f.write("127.0.0.1 localhost\n" + "".join(f"{POD_IP} {h}\n" for h in hosts))
    return root


def model(work: str) -> str:
    """A model directory: a Llama config and a WordLevel tokenizer the router loads offline."""
    models = os.path.join(work, "models")
    m = os.path.join(models, "tiny")
    os.makedirs(m, exist_ok=True)
    with open(os.path.join(m, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_attention_heads": 8,
                   "num_key_value_heads": 8, "hidden_size": 256, "num_hidden_layers": 2}, f)
    return models


def tokenizer(work: str, tree: str) -> None:
    code = (
        "import sys\n"
        "from tokenizers import Tokenizer, models, pre_tokenizers\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "words = ['<unk>', '<s>', '</s>', 'hello', 'world', 'stand-in', 'router']\n"
        "tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token='<unk>'))\n"
        "tok.pre_tokenizer = pre_tokenizers.Whitespace()\n"
        "PreTrainedTokenizerFast(tokenizer_object=tok, unk_token='<unk>', bos_token='<s>',\n"
        "                        eos_token='</s>').save_pretrained(sys.argv[1])\n"
    )
    pyenv = sorted(glob.glob("/root/.pyenv/versions/3.12.*/bin/python3.12"))
    py = pyenv[-1] if pyenv else shutil.which("python3.12")
    env = {"PATH": PATH, "PYTHONPATH": tree, "HF_HUB_OFFLINE": "1"}
    subprocess.run([py, "-c", code, os.path.join(work, "models/tiny")], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# --- containers: infera-exec as the command, in an image root ---------------------------------

INROOT = r"""
set -e
root=$1 overlay=$2 models=$3; shift 3
mount --make-rprivate /
mount --bind "$overlay" "$root/opt/infera" && mount -o remount,bind,ro "$root/opt/infera"
mount --bind "$models" "$root/models"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
exec chroot "$root" "$@"
"""


def container(name: str, root: str, overlay: str, models: str, argv: list[str], env: dict, work: str) -> subprocess.Popen:
    """Start `argv` as a container's command: chroot in `root`, its own mount namespace, the
    container's environment only. The Popen's pid is the launcher's (every step execs)."""
    os.makedirs(os.path.join(root, "opt/infera"), exist_ok=True)
    os.makedirs(os.path.join(root, "models"), exist_ok=True)
    # The kubelet creates the termination message file; the launcher only writes an existing one.
    open(os.path.join(root, "tmp/termination-log"), "w").close()
    full = {"HOME": "/root", "HF_HUB_OFFLINE": "1", "INFERA_ENGINE_READY_TIMEOUT": "120",
            "INFERA_TERMINATION_LOG": "/tmp/termination-log", **env}
    out = open(os.path.join(work, f"{name}.log"), "w")
    p = subprocess.Popen(["unshare", "--mount", "sh", "-c", INROOT, "inroot", root, overlay, models, *argv],
                         env=full, stdout=out, stderr=subprocess.STDOUT)
    procs.append((name, p))
    return p


def pids_in_netns() -> list[tuple[int, str]]:
    """Every process in this network namespace but this script and the services."""
    mine = os.readlink("/proc/self/ns/net")
    keep = {os.getpid()} | {p.pid for n, p in procs if n in ("etcd", "nats")}
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in keep:
            continue
        try:
            if os.readlink(f"/proc/{d}/ns/net") != mine:
                continue
            cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out.append((int(d), cmd))
    return out


def models_listed(router: str) -> set[str]:
    code, body = http(f"{router}/v1/models")
    return {m["id"] for m in json.loads(body)["data"]} if code == 200 else set()


def chat(router: str, model_name: str, text: str, stream: bool = False) -> tuple[int, str]:
    code, body = http(f"{router}/v1/chat/completions",
                      {"model": model_name, "messages": [{"role": "user", "content": text}], "stream": stream}, timeout=30)
    if code != 200 or stream:
        return code, body
    return code, json.loads(body)["choices"][0]["message"]["content"]


def main() -> int:
    launcher, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if os.environ.get("E2E_IN_NETNS") != "1":
        os.makedirs(work, exist_ok=True)
        env = dict(os.environ, E2E_IN_NETNS="1")
        return subprocess.run(["unshare", "--net", sys.executable, __file__, launcher, work], env=env).returncode
    network()

    log("== build: the overlay with the real infera trees, image roots, a model")
    overlay = os.path.join(work, "overlay")
    sh(os.path.join(REPO, "examples/stage-overlay"), overlay, launcher)
    hosts = ["vgrp-0.vgrp.default", "sgrp-0.sgrp.default"]
    vroot = image_root("vllm-0.28", work, hosts)
    sroot = image_root("sglang", work, hosts)  # CPython 3.10: the rocm7-py310 tree
    models = model(work)
    tokenizer(work, os.path.join(overlay, "trees/rocm7-py312/site-packages"))

    log("== services: etcd and NATS (JetStream) on the pod address")
    service("etcd", ["etcd", "--data-dir", os.path.join(work, "etcd"), "--listen-client-urls", f"http://{POD_IP}:2379",
                     "--advertise-client-urls", f"http://{POD_IP}:2379", "--listen-peer-urls", "http://127.0.0.1:2380"], work)
    service("nats", ["nats-server", "-js", "-a", POD_IP, "-p", "4222", "-sd", os.path.join(work, "nats")], work)
    check(wait_for("etcd", lambda: http(f"http://{POD_IP}:2379/health")[0] == 200, 30), "etcd is up")

    gpu1 = {"PATH": PATH, "HIP_VISIBLE_DEVICES": "0", "POD_IP": POD_IP}
    sg = {"PATH": VENV_PATH, "HIP_VISIBLE_DEVICES": "0", "POD_IP": POD_IP}
    L = "/opt/infera/bin/infera-exec"
    c = {}

    log("== router and single-node workers, each with infera-exec as the container command")
    c["router"] = container("router", vroot, overlay, models, [
        L, "python3", "-m", "infera.server", *DISCOVERY, "--router-tokenizer-path", "/models/tiny",
        "--host", "0.0.0.0", "--port", "8000"], {"PATH": PATH}, work)
    c["vllm"] = container("vllm", vroot, overlay, models, [
        L, "worker", "--", "--model", "/models/tiny", "--served-model-name", "tiny-vllm", *DISCOVERY,
        "--host", "0.0.0.0", "--port", "8001"], gpu1, work)
    c["sglang"] = container("sglang", sroot, overlay, models, [
        L, "python3", "-m", "infera.engine.sglang", "--model-path", "/models/tiny", "--served-model-name", "tiny-sglang",
        *DISCOVERY, "--host", "0.0.0.0", "--port", "8002", "--kv-events-bind", "tcp://0.0.0.0:5602",
        "--kv-snapshot-port", "8802"], sg, work)

    log("== a 2-rank vLLM group and a 2-rank sglang group from LeaderWorkerSet variables")
    for rank in (0, 1):
        lws = {"LWS_LEADER_ADDRESS": "vgrp-0.vgrp.default", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": str(rank)}
        c[f"vgrp-{rank}"] = container(f"vgrp-{rank}", vroot, overlay, models, [
            L, "worker", "--", "--model", "/models/tiny", "--served-model-name", "tiny-vllm-group", *DISCOVERY,
            "--port", "8101"], {**gpu1, **lws}, work)
        lws = {"LWS_LEADER_ADDRESS": "sgrp-0.sgrp.default", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": str(rank)}
        c[f"sgrp-{rank}"] = container(f"sgrp-{rank}", sroot, overlay, models, [
            L, "worker", "--", "--model-path", "/models/tiny", "--served-model-name", "tiny-sglang-group", *DISCOVERY,
            "--port", str(8201 + rank), "--kv-events-bind", f"tcp://0.0.0.0:{5611 + rank}",
            "--kv-snapshot-port", str(8811 + rank)], {**sg, **lws}, work)

    router = f"http://{POD_IP}:8000"
    names = {"tiny-vllm", "tiny-sglang", "tiny-vllm-group", "tiny-sglang-group"}
    ready = wait_for("router lists every worker", lambda: names <= models_listed(router), 120)
    check(ready, "the router discovered all four workers through etcd",
          f"listed: {models_listed(router)}\n" + "".join(f"--- {n}\n{logtail(os.path.join(work, n + '.log'))}" for n in c))

    log("== completions through the router")
    for name, engine in (("tiny-vllm", "vllm 0.28.0"), ("tiny-sglang", "sglang 0.5.23"),
                         ("tiny-vllm-group", "vllm 0.28.0"), ("tiny-sglang-group", "sglang 0.5.23")):
        code, text = chat(router, name, "hello world")
        check(code == 200 and f"stand-in {engine}" in text and f"model={name}" in text and text.endswith("hello world"),
              f"{name}: /v1/chat/completions through the router answered by the stand-in {engine}", f"{code}: {text}")
        if name.endswith("-group"):
            check("nnodes=2" in text, f"{name}: served by the 2-node group (the leader's engine saw every rank join)", text)
    code, text = chat(router, "tiny-vllm", "hello world", stream=True)
    check(code == 200 and "data: " in text and "[DONE]" in text, "tiny-vllm: a streamed chat completion", text[:400])
    for rank in (1,):
        check(c[f"vgrp-{rank}"].poll() is None and c[f"sgrp-{rank}"].poll() is None, "ranks 1 of both groups are running")
    vlog = logtail(os.path.join(work, "vgrp-1.log"), 200)
    check("joined the leader at vgrp-0.vgrp.default" in vlog,
          "vLLM rank 1 joined the leader's rendezvous address (the name LWS gave)", vlog)

    log("== a refused worker: a capability the tree lacks")
    refused = container("refused", sroot, overlay, models, [
        L, "worker", "--require", "hipfile", "--", "--model-path", "/models/tiny", *DISCOVERY, "--port", "8003"], sg, work)
    rc = refused.wait(30)
    term = logtail(os.path.join(sroot, "tmp/termination-log"))
    out = logtail(os.path.join(work, "refused.log"))
    check(rc == 69 and "hipfile" in out and "hipfile" in term, "the refused worker exits 69 and says why, in its log and its termination message",
          f"rc={rc}\n{out}\ntermination-log: {term}")
    code, text = chat(router, "tiny-vllm", "hello world")
    check(code == 200, "the router still serves the other workers", text)

    log("== SIGTERM before the engine is ready, infera-exec --init: the engine it left is ended")
    slow = container("slow", vroot, overlay, models, [
        L, "worker", "--init", "--", "--model", "/models/tiny", *DISCOVERY, "--port", "8301"],
        {**gpu1, "STANDIN_LOAD_SECONDS": "600"}, work)
    started = wait_for("the slow engine loads", lambda: any("vllm.entrypoints.cli.main" in cmd and "8301" in cmd
                                                            for _, cmd in pids_in_netns()), 30)
    slow.send_signal(signal.SIGTERM)
    try:
        rc = slow.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    left = [(p, cmd) for p, cmd in pids_in_netns() if "8301" in cmd]
    check(started and rc == 143 and not left,
          "SIGTERM while the engine loads: the launcher (--init) exits 143 and its engine is gone",
          f"started={started} rc={rc} left={left}\n{logtail(os.path.join(work, 'slow.log'))}")

    log("== SIGTERM: each container drains and leaves no process behind")
    c["vllm"].send_signal(signal.SIGTERM)
    check(wait_for("deregistered", lambda: "tiny-vllm" not in models_listed(router), 30),
          "the vLLM worker deregistered on SIGTERM (the router no longer lists it)")
    for n, p in c.items():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes = {}
    for n, p in c.items():
        try:
            codes[n] = p.wait(60)
        except subprocess.TimeoutExpired:
            codes[n] = None
    check(all(v is not None for v in codes.values()), "every container exited within 60 s of SIGTERM", str(codes))
    left = pids_in_netns()
    check(not left, "no process is left behind", "\n".join(f"{p} {cmd}" for p, cmd in left))

    for n, p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    if failures:
        log(f"e2e: {len(failures)} check(s) failed: {failures} (logs in {work})")
        return 1
    log("e2e: all checks passed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
