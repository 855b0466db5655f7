#!/usr/bin/env python3
"""Docker, for real: the launcher as `docker run`'s entrypoint, against this machine's Docker daemon.

REAL: the Docker daemon and CLI — images built with `docker build` and `docker import`, named
volumes, user-defined networks and their DNS, `--restart on-failure`, `docker stop`, `docker
kill`, `docker network disconnect`; etcd (Debian's binary, in an image FROM scratch); the
router and the engine wrappers from the Infera sources (the overlay image that
`scripts/build-overlay-image --docker` builds); infera-exec as every container's entrypoint.
STAND-IN: the engines (examples/standin/engines: the real parsers' recorded options, the
OpenAI routes, the multi-node rendezvous) in engine images of the real layout
(`examples/images/build --docker`); no GPU, so `-e HIP_VISIBLE_DEVICES=0` stands where the
recipe passes `--device /dev/kfd --device /dev/dri`.

    tests/docker/e2e.py WORKDIR

1. docs/deploying.md's `docker run` recipe as written (the README's lines are in it), through
   the real router; `docker stop` drains the worker.
2. A refusal: its exit code as `docker inspect` shows it, its message in `docker logs` and in
   a termination-message file.
3. PID 1 under `docker stop`: the engine as PID 1 outlives SIGTERM until the grace period's
   SIGKILL (137); with `--init` the launcher forwards it (143) and reaps what the engine left.
4. A 2-rank vLLM group and a 2-rank sglang group, each rank its own container with its own
   address on a Docker network, from LeaderWorkerSet's variables: rank 1 started first waits
   for the leader's name; the leader killed and restarted; rank 1 cut off from the network;
   each time the group comes back (`--restart unless-stopped`, and for sglang's rank 1, whose
   wrapper outlives its engine, `docker restart`, as LeaderWorkerSet recreates a group) and
   serves through the router; `docker stop` ends both ranks within the grace period.

Prints `ok: ...` per check and `docker e2e: all checks passed`; exit 0 only then. Removes what
it created (containers, networks, volumes), and first what a previous run left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests/stack"))
import e2e  # noqa: E402 - the stack test's model, tokenizer and HTTP helpers
from e2e import check, log, wait_for  # noqa: E402

ENGINE = "docker.io/vllm/vllm-openai-rocm:kimi-k3"
VLLM = "localhost/infera-standin-vllm-rocm72:test"
SGLANG = "localhost/infera-standin-sglang:test"
ETCD = "localhost/infera-etcd:test"
STANDIN_OVERLAY = "localhost/infera-overlay:test"
L = "/opt/infera/bin/infera-exec"
DISCOVERY = ["--discovery-backend", "etcd", "--etcd-endpoint", "etcd:2379",
             "--request-transport", "http", "--kv-event-transport", "zmq"]
# What the recipe creates, and what this script does: removed before and after.
CONTAINERS = ["etcd", "kimi-k3", "router", "infera-e2e-refused", "infera-e2e-pid1", "infera-e2e-init",
              "infera-vgrp-0", "infera-vgrp-1", "infera-sgrp-0", "infera-sgrp-1"]
NETWORKS = ["infera-groups", "infera"]
VOLUMES = ["infera-overlay", "infera-e2e-standin"]


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], text=True, capture_output=True, timeout=timeout)


def must(*args: str, timeout: float = 300) -> str:
    r = docker(*args, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"docker e2e: `docker {' '.join(args)}` failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def state(name: str) -> dict:
    r = docker("inspect", "--format", "{{json .State}} {{.RestartCount}}", name)
    if r.returncode != 0:
        return {}
    st, restarts = r.stdout.rsplit(" ", 1)
    return dict(json.loads(st), RestartCount=int(restarts))


def exits(name: str, since: float) -> list[int]:
    """The exit codes of `name`'s ends since `since` (`docker events`: each `die` says it)."""
    r = docker("events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}", "--filter", f"container={name}",
               "--filter", "event=die", "--format", "{{.Actor.Attributes.exitCode}}")
    return [int(c) for c in r.stdout.split()]


def logs(name: str) -> str:
    r = docker("logs", name)
    return r.stdout + r.stderr


def clean() -> None:
    docker("rm", "-f", "-v", *CONTAINERS)
    for n in NETWORKS:
        docker("network", "rm", n)
    docker("volume", "rm", "-f", *VOLUMES)


def models(work: str) -> str:
    """/data/models of the recipe: kimi-k3 as a tiny Llama with a tokenizer the router loads."""
    m = e2e.model(work)
    e2e.tokenizer(work, os.path.join(REPO, "target/overlay-image/trees/rocm7-py312/site-packages"))
    shutil.copytree(os.path.join(m, "tiny"), os.path.join(m, "kimi-k3"), dirs_exist_ok=True)
    return m


def block(doc: str, after: str) -> str:
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    return text.split(after, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]


def recipe(models_dir: str) -> None:
    log("== docs/deploying.md's `docker run` recipe, as written")
    written = block("docs/deploying.md", "**As a `docker run` entrypoint**")
    readme = block("README.md", "**As a `docker run` entrypoint**")
    check(readme.strip() in written, "the README's docker lines are the recipe's", readme)
    here = (written.replace(ENGINE, VLLM).replace("quay.io/coreos/etcd:v3.5.21", ETCD)
            .replace("/data/models", models_dir)
            .replace("--device /dev/kfd --device /dev/dri", "-e HIP_VISIBLE_DEVICES=0")
            .replace("-p 8000:8000", "-p 127.0.0.1::8000")
            .replace("localhost:8000", "$(docker port router 8000/tcp)"))
    commands = [c for c in here.replace("\\\n", " ").splitlines() if c.strip()]
    check(len(commands) == 7 and commands[-1].startswith("curl "), "the recipe: 6 docker commands and a request",
          "\n".join(commands))
    for c in commands[:-1]:
        r = subprocess.run(["sh", "-c", c], text=True, capture_output=True, timeout=300)
        if not check(r.returncode == 0, f"ran: {c[:70]}…", r.stdout + r.stderr):
            return
    router = "http://" + must("port", "router", "8000/tcp").splitlines()[0]
    ready = wait_for("router lists kimi-k3", lambda: "kimi-k3" in e2e.models_listed(router), 120)
    check(ready, "the router found the worker through etcd", logs("kimi-k3")[-3000:] + logs("router")[-2000:])
    r = subprocess.run(["sh", "-c", commands[-1]], text=True, capture_output=True, timeout=60)
    answer = json.loads(r.stdout or "{}").get("choices", [{}])[0].get("message", {}).get("content", "")
    check(r.returncode == 0 and answer.startswith("stand-in vllm 0.28.0") and answer.endswith("hello world"),
          "the recipe's request is answered through the router by the worker's engine", r.stdout + r.stderr)
    started = time.monotonic()
    docker("stop", "kimi-k3", timeout=60)
    took = time.monotonic() - started
    st = state("kimi-k3")
    check(st.get("ExitCode") == 0 and took < 10, f"`docker stop kimi-k3`: drained, exit 0 in {took:.1f} s (grace 10 s)",
          f"{st}\n{logs('kimi-k3')[-2000:]}")
    check(wait_for("deregistered", lambda: "kimi-k3" not in e2e.models_listed(router), 30),
          "the stopped worker deregistered (the router no longer lists it)")


def refusal(models_dir: str, work: str) -> None:
    log("== a refusal: exit code in `docker inspect`, the message in `docker logs` and the termination file")
    term = os.path.join(work, "termination-log")
    open(term, "w").close()
    r = docker("run", "--name", "infera-e2e-refused", "-v", "infera-overlay:/opt/infera:ro",
               "-v", f"{models_dir}:/models:ro", "-e", "HIP_VISIBLE_DEVICES=0",
               "--mount", f"type=bind,src={term},dst=/dev/termination-log", "--entrypoint", L, SGLANG,
               "worker", "--require", "hipfile", "--", "--model-path", "/models/kimi-k3", *DISCOVERY)
    st = state("infera-e2e-refused")
    out = logs("infera-e2e-refused")
    message = open(term, encoding="utf-8").read()
    check(r.returncode == 69 and st.get("ExitCode") == 69 and st.get("Status") == "exited",
          "`docker run` and `docker inspect` give the refusal's exit code, 69", f"{r.returncode} {st}")
    check("error[" in out and "hipfile" in out and "\nhint: " in out, "`docker logs` has the refusal and its hint", out)
    check(message.startswith("infera-exec refused [") and "(exit 69)" in message and "hipfile" in message,
          "the message is in the termination file a bind mount gives (Docker keeps none of its own)", message)


def pid1(work: str) -> None:
    log("== PID 1 under `docker stop`: 137 without --init, 143 with it")
    must("volume", "create", "infera-e2e-standin")
    must("run", "--rm", "-v", "infera-e2e-standin:/overlay", STANDIN_OVERLAY, "install", "/overlay")
    scan = ("import os\nz=[];k=[]\nfor p in os.listdir('/proc'):\n  if p.isdigit():\n"
            "    try: s=open('/proc/%s/stat'%p).read()\n    except OSError: continue\n"
            "    r=s.rsplit(')',1)[1].split()\n    if r[0]=='Z': z.append(p)\n    if r[1]=='1': k.append(p)\n"
            "print('ZOMBIES', len(z))\nprint('CHILDREN', len(k))\n"
            "print('PID1', open('/proc/1/cmdline').read().split(chr(0))[0])")
    for name, init, orphans in (("infera-e2e-pid1", [], "0"), ("infera-e2e-init", ["--init"], "20")):
        must("run", "-d", "--name", name, "-v", "infera-e2e-standin:/opt/infera:ro",
             "-e", "INFERA_STANDIN_WAIT=120", "-e", "INFERA_STANDIN_SIGNALS=default",
             "-e", f"INFERA_STANDIN_ORPHANS={orphans}", "--entrypoint", L, VLLM,
             "server", *init, "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B")
        up = wait_for("the stand-in reports", lambda: "INFERA-STANDIN " in logs(name), 30)
        report = json.loads(logs(name).split("INFERA-STANDIN ", 1)[1].splitlines()[0]) if up else {}
        seen = ""
        if init:
            def only_the_engine_left() -> bool:
                nonlocal seen
                seen = docker("exec", name, "python3", "-c", scan).stdout
                return "CHILDREN 1\n" in seen
            wait_for("the orphans are reaped", only_the_engine_left, 30)
        started = time.monotonic()
        docker("stop", "-t", "3", name, timeout=60)
        took = time.monotonic() - started
        code = state(name).get("ExitCode")
        if init:
            check(report.get("pid") != 1 and "PID1 /opt/infera/bin/infera-exec" in seen and "ZOMBIES 0" in seen,
                  "--init: the launcher is PID 1, the engine its child, the orphans it left reaped", f"{report}\n{seen}")
            check(code == 143 and took < 3, f"--init: `docker stop` ends the engine with the forwarded SIGTERM: 143 in {took:.1f} s",
                  f"{code}\n{logs(name)[-1500:]}")
        else:
            check(report.get("pid") == 1, "the engine is the container's PID 1 (the launcher exec'd it)", str(report)[:400])
            check(code == 137 and took >= 3, f"without --init: SIGTERM's default action does not end PID 1; killed after the grace period: 137 in {took:.1f} s",
                  f"{code}\n{logs(name)[-1500:]}")


def network() -> str:
    """A network for the groups with a subnet of its own (`--ip` needs one); etcd and the
    router joined to it."""
    for subnet in ("10.213.7.0/24", "10.217.9.0/24", "172.29.213.0/24"):
        if docker("network", "create", "--subnet", subnet, "infera-groups").returncode == 0:
            must("network", "connect", "infera-groups", "etcd")
            must("network", "connect", "infera-groups", "router")
            return subnet.rsplit(".", 1)[0]
    raise SystemExit("docker e2e: no free subnet for infera-groups (10.213.7.0/24, 10.217.9.0/24, 172.29.213.0/24)")


def group(kind: str, image: str, model_args: list[str], prefix: str, models_dir: str, router: str, lingers: bool,
          want: tuple) -> None:
    """`want`: the (leader, rank 1) exit codes when the leader is killed, and when rank 1 is
    cut off (docs/multinode.md, "A rank lost")."""
    name = [f"infera-{kind}-0", f"infera-{kind}-1"]
    ip = [f"{prefix}.{10 + 10 * (kind == 'sgrp')}", f"{prefix}.{11 + 10 * (kind == 'sgrp')}"]
    served = f"tiny-{kind}"
    engine = "vllm 0.28.0" if kind == "vgrp" else "sglang 0.5.23"

    def start(rank: int) -> None:
        must("run", "-d", "--name", name[rank], "--network", "infera-groups", "--ip", ip[rank], "--shm-size", "16g",
             "--restart", "unless-stopped", "-v", "infera-overlay:/opt/infera:ro", "-v", f"{models_dir}:/models:ro",
             "-e", "HIP_VISIBLE_DEVICES=0", "-e", f"POD_IP={ip[rank]}", "-e", f"LWS_LEADER_ADDRESS={name[0]}",
             "-e", "LWS_GROUP_SIZE=2", "-e", f"LWS_WORKER_INDEX={rank}", "-e", "STANDIN_PEER_TIMEOUT=5",
             "--entrypoint", L, image, "worker", "--", *model_args, "--served-model-name", served, *DISCOVERY)

    def serves() -> bool:
        code, text = e2e.chat(router, served, "hello world")
        return code == 200 and "nnodes=2" in text and text.startswith(f"stand-in {engine}")

    def waits(count: int) -> bool:
        return logs(name[1]).count(f"waiting for the leader `{name[0]}` to resolve") >= count

    def tails() -> str:
        return "".join(f"--- {n} {state(n)}\n{logs(n)[-2500:]}\n" for n in name)

    log(f"== a 2-rank {engine.split()[0]} group, a container a rank on infera-groups")
    start(1)
    if not check(wait_for("rank 1 waits", lambda: waits(1), 30),
                 f"{kind}: rank 1, started first, waits for the leader's name (Docker's DNS does not know it yet)", tails()):
        return
    start(0)
    if not check(wait_for("the group serves", serves, 120),
                 f"{kind}: the leader started, rank 1 joined it, the group (nnodes=2) serves through the router", tails()):
        return
    check(f"joined the leader at {name[0]}" in logs(name[1]), f"{kind}: rank 1 joined the leader by the name LWS gave")

    # The leader killed: rank 1's engine exits with the group. vLLM's rank 1 container exits
    # and Docker restarts it; sglang's stays up without its engine (infera's sglang wrapper
    # does not watch a follower's engine) until it is restarted, as LeaderWorkerSet recreates
    # the group. Restarted, rank 1 waits for the leader's name (gone from Docker's DNS).
    restarts = state(name[1]).get("RestartCount", 0)
    t0 = time.time()
    must("kill", name[0])
    if not check(wait_for("rank 1's engine exits", lambda: "the leader went away: exiting" in logs(name[1]), 30),
                 f"{kind}: leader killed: rank 1's engine exits with the group", tails()):
        return
    if lingers:
        check(state(name[1]).get("Running") and state(name[1]).get("RestartCount") == restarts,
              f"{kind}: rank 1's container stays up without its engine (the wrapper's follower waits for a signal only)",
              tails())
        must("restart", "-t", "10", name[1])
    came_back = wait_for("rank 1 restarted and waits", lambda: state(name[1]).get("RestartCount", 0) > restarts and waits(2), 60)
    codes = (exits(name[0], t0), exits(name[1], t0))
    if not check((came_back or (lingers and waits(2))) and codes == want[0],
                 f"{kind}: rank 1 restarted{' (docker restart)' if lingers else ' (--restart unless-stopped)'} waits for the "
                 f"leader's name (exit codes: leader {codes[0]}, rank 1 {codes[1]})", tails()):
        return
    must("start", name[0])
    if not check(wait_for("the group serves again", serves, 120),
                 f"{kind}: leader restarted: rank 1 resolves it, rejoins, the group serves again", tails()):
        return

    # Rank 1 cut off: each side's collective times out (STANDIN_PEER_TIMEOUT 5 s), both
    # engines exit, the leader's container restarts (its wrapper exits 0 when its engine
    # died: `unless-stopped`, not `on-failure`); rank 1, restarted while cut off, waits for
    # the leader's name until it is back on the network.
    before = state(name[0]).get("RestartCount", 0)
    t0 = time.time()
    must("network", "disconnect", "infera-groups", name[1])
    silent = "was silent for 5 s (the collective timed out): exiting"
    both = wait_for("both engines time out", lambda: logs(name[0]).count(silent) >= 1 and logs(name[1]).count(silent) >= 1, 60)
    if not check(both and wait_for("the leader restarted", lambda: state(name[0]).get("RestartCount", 0) > before, 30),
                 f"{kind}: rank 1 disconnected: both ranks' collectives time out, both engines exit, the leader restarts", tails()):
        return
    if lingers:
        must("restart", "-t", "10", name[1])
    cut_off = wait_for("rank 1 waits, cut off", lambda: waits(3), 60)
    codes = (exits(name[0], t0), exits(name[1], t0))
    check(cut_off and codes == want[1],
          f"{kind}: rank 1, cut off, waits for the leader's name instead of failing (exit codes: leader {codes[0]}, "
          f"rank 1 {codes[1]})", tails())
    must("network", "connect", "--ip", ip[1], "infera-groups", name[1])
    if not check(wait_for("the group serves once more", serves, 120),
                 f"{kind}: rank 1 reconnected: it resolves the leader, rejoins, the group serves again", tails()):
        return

    started = time.monotonic()
    docker("stop", *name, timeout=60)
    took = time.monotonic() - started
    st = [state(n) for n in name]
    check(all(s.get("Status") == "exited" and s.get("ExitCode") != 137 for s in st) and took < 10,
          f"{kind}: `docker stop` ends both ranks within the grace period ({took:.1f} s, exit {[s.get('ExitCode') for s in st]})",
          tails())
    check(wait_for("deregistered", lambda: served not in e2e.models_listed(router), 40),
          f"{kind}: the stopped group deregistered")


def main() -> int:
    work = os.path.abspath(sys.argv[1])
    if docker("version", "--format", "{{.Server.Version}}").returncode != 0:
        log("docker e2e: no Docker daemon answers")
        return 1
    log(f"== Docker Engine {must('version', '--format', '{{.Server.Version}}').strip()}, "
        f"CLI {must('version', '--format', '{{.Client.Version}}').strip()}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    log("== build: the overlay image with the real infera trees, the stand-in engine images, etcd")
    for build in (["scripts/build-overlay-image", "--docker"], ["examples/images/build", "--docker"]):
        r = subprocess.run(["flock", os.path.join(REPO, "target/e2e.lock"), os.path.join(REPO, build[0]), *build[1:]],
                           text=True, capture_output=True)
        if r.returncode != 0:
            raise SystemExit(f"docker e2e: {' '.join(build)} failed:\n{r.stdout}{r.stderr}")
        log(r.stdout.strip())
    clean()
    models_dir = models(work)
    try:
        recipe(models_dir)
        refusal(models_dir, work)
        pid1(work)
        if not e2e.failures:
            prefix = network()
            router = "http://" + must("port", "router", "8000/tcp").splitlines()[0]
            group("vgrp", VLLM, ["--model", "/models/tiny"], prefix, models_dir, router, lingers=False,
                  want=(([137], [1]), ([0], [1])))
            group("sgrp", SGLANG, ["--model-path", "/models/tiny"], prefix, models_dir, router, lingers=True,
                  want=(([137], [0]), ([0], [0])))
    finally:
        clean()
    left = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    check(not set(left) & set(CONTAINERS), "no container of this test is left", " ".join(left))
    if e2e.failures:
        log(f"docker e2e: {len(e2e.failures)} check(s) failed: {e2e.failures}")
        return 1
    log("docker e2e: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
