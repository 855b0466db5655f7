"""STAND-IN engine core, shared by the stand-in `vllm` and `sglang` packages of the test images.

Not vLLM, not sglang: what the real Infera wrappers need from an engine, and nothing they do
not. It keeps the real engines' contract where the wrappers and the launcher depend on it:

* the command line is parsed by a parser rebuilt from the real parser's recorded actions
  (`<engine>_parser.json`, written by scripts/check-engine-parsers from the real vLLM/sglang):
  an option the real engine does not have, a bad choice or a bad int is a usage error, exit 2;
* the HTTP server listens on the given host/port only once the engine is "loaded" (for a
  multi-node group: once every rank joined the leader's rendezvous address), and answers
  /health, /v1/models, /v1/chat/completions, /v1/completions (streaming too) and /metrics
  with the series the wrappers read; replies are deterministic and name how it was started;
* a follower joins the leader at the rendezvous address it was given and dies when the
  leader goes away (and the leader when a follower does, or when a peer is silent for
  STANDIN_PEER_TIMEOUT seconds: cut off from the network); a group whose ranks disagree on
  the layout fails on every rank.

Standard library only: the images it goes into have no packages of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))


def log(engine: str, msg: str) -> None:
    print(f"[stand-in {engine}] {msg}", file=sys.stderr, flush=True)


# --- the weight load ----------------------------------------------------------------------


def load_weights(engine: str, model: str) -> None:
    """With STANDIN_LOAD_WEIGHTS=1: load the model directory's *.safetensors as vLLM's lazy
    path does (`safetensors_weights_iterator`: the files in `_natural_sort_key` order, each
    memory-mapped, every tensor copied out in the file's key order), touching every byte
    through the mapping the way `get_tensor` does; then print `STANDIN-LOADED <unix time>
    <bytes>` on stdout (what bench/load times). Standard library only: the safetensors header
    is 8 bytes of length and a JSON table of each tensor's data offsets."""
    import mmap
    import re

    if os.environ.get("STANDIN_LOAD_WEIGHTS") != "1" or not os.path.isdir(model):
        return
    print(f"STANDIN-LOADING {time.time():.3f}", flush=True)
    key = lambda s: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
    files = sorted((f for f in os.listdir(model) if f.endswith(".safetensors")), key=key)
    total = 0
    for name in files:
        with open(os.path.join(model, name), "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            n = int.from_bytes(mm[:8], "little")
            header = json.loads(mm[8:8 + n])
            base = 8 + n
            for k in sorted(k for k in header if k != "__metadata__"):
                a, b = header[k]["data_offsets"]
                total += len(bytes(mm[base + a:base + b]))
    print(f"STANDIN-LOADED {time.time():.3f} {total}", flush=True)
    log(engine, f"loaded {len(files)} weight files, {total} bytes")


# --- the parser, rebuilt from the real one's recorded actions -------------------------------


def _json_object(text: str):
    """vLLM's parse_dataclass types: a JSON object read as attributes (the wrappers getattr)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    ns = types.SimpleNamespace(**value)
    for key in ("kv_role", "kv_connector", "engine_id", "kv_ip", "kv_port", "kv_connector_extra_config"):
        if not hasattr(ns, key):
            setattr(ns, key, None)
    return ns


def _human_int(text: str):
    t = text.strip().lower()
    for suffix, mult in (("k", 10**3), ("m", 10**6), ("g", 10**9), ("ki", 2**10), ("mi", 2**20), ("gi", 2**30)):
        if t.endswith(suffix) and t[: -len(suffix)].replace(".", "", 1).isdigit():
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def _type(name: str | None):
    if name is None or name == "str":
        return str
    if name.startswith("optional:"):
        inner = _type(name[len("optional:") :])
        return lambda s: None if s in ("None", "none", "") else inner(s)
    return {
        "int": int,
        "float": float,
        "json": json.loads,
        "json-object": _json_object,
        "json-or-str": lambda s: json.loads(s) if s[:1] in "{[" else s,
        "human-readable-int": _human_int,
        "human-readable-int-or-auto": lambda s: -1 if s == "auto" else _human_int(s),
    }.get(name, str)


def add_recorded_actions(parser: argparse.ArgumentParser, recorded: str) -> argparse.ArgumentParser:
    with open(os.path.join(HERE, recorded), encoding="utf-8") as f:
        doc = json.load(f)
    for a in doc["actions"]:
        kw: dict = {"dest": a["dest"], "default": a.get("default")}
        kind = a["kind"]
        if kind == "store" and a.get("nargs") == 0:
            kind = "store_true"  # a custom flag action (sglang's deprecated flags): takes no value
        if kind in ("store", "append"):
            kw.update(type=_type(a.get("type")), nargs=a.get("nargs"))
            if kind == "append":
                kw["action"] = "append"
            if a.get("choices") is not None:
                kw["choices"] = a["choices"]
        elif kind == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif kind in ("store_true", "store_false", "count"):
            kw["action"] = kind
        elif kind == "store_const":
            kw.update(action="store_const", const=a.get("const"))
        if a.get("positional"):
            del kw["dest"]
            parser.add_argument(a["dest"], **kw)
        elif kind == "bool":
            # BooleanOptionalAction adds the --no- form itself.
            parser.add_argument(*[f for f in a["flags"] if not f.startswith("--no-")], **kw)
        else:
            parser.add_argument(*a["flags"], **kw)
    return parser


# --- multi-node rendezvous --------------------------------------------------------------------


def leader_rendezvous(engine: str, port: int, nnodes: int, layout: dict, timeout: float) -> list:
    """Rank 0: accept nnodes-1 followers on `port` (all interfaces, as torch's TCPStore and
    sglang's dist-init do); each must report the same layout. Returns the open connections."""
    srv = socket.create_server(("", port), reuse_port=False)
    srv.settimeout(timeout)
    log(engine, f"rank 0: waiting for {nnodes - 1} follower(s) on port {port}")
    conns = []
    joined = set()
    deadline = time.monotonic() + timeout
    while len(joined) < nnodes - 1:
        srv.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, peer = srv.accept()
        except socket.timeout:
            log(engine, f"rank 0: timed out: {len(joined)} of {nnodes - 1} follower(s) joined")
            sys.exit(1)
        hello = json.loads(conn.makefile().readline() or "{}")
        rank = hello.pop("rank", None)
        if hello != layout or not isinstance(rank, int) or not 0 < rank < nnodes or rank in joined:
            msg = f"rank {rank} from {peer[0]} does not fit this group: it has {hello}, rank 0 has {layout}"
            conn.sendall((json.dumps({"ok": False, "error": msg}) + "\n").encode())
            log(engine, "rank 0: " + msg)
            sys.exit(1)
        conn.sendall(b'{"ok": true}\n')
        joined.add(rank)
        conns.append(conn)
        log(engine, f"rank 0: rank {rank} joined from {peer[0]}")
    srv.close()
    for c in conns:  # a follower that goes away takes the group down, as NCCL would
        threading.Thread(target=_die_on_close, args=(engine, c, "a follower"), daemon=True).start()
    return conns


def follower_join(engine: str, host: str, port: int, rank: int, layout: dict, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                log(engine, f"rank {rank}: could not reach the leader at {host}:{port}: {e}")
                sys.exit(1)
            time.sleep(0.5)
    conn.settimeout(None)
    conn.sendall((json.dumps(dict(layout, rank=rank)) + "\n").encode())
    reply = json.loads(conn.makefile().readline() or '{"ok": false, "error": "leader closed"}')
    if not reply.get("ok"):
        log(engine, f"rank {rank}: refused by the leader: {reply.get('error')}")
        sys.exit(1)
    log(engine, f"rank {rank}: joined the leader at {host}:{port}")
    return conn


def _die_on_close(engine: str, conn: socket.socket, who: str) -> None:
    """Keep the link to a peer: a byte each second each way. The peer's process gone (its
    socket closed) or the peer silent for STANDIN_PEER_TIMEOUT seconds (cut off from the
    network: default 600, torch.distributed's NCCL process-group timeout, after which the
    watchdog tears the rank down) ends this rank with 1, as the real engine's collectives
    would."""
    timeout = float(os.environ.get("STANDIN_PEER_TIMEOUT", "600"))

    def beat() -> None:
        try:
            while True:
                conn.sendall(b"\n")
                time.sleep(1)
        except OSError:
            pass

    threading.Thread(target=beat, daemon=True).start()
    conn.settimeout(timeout)
    why = "went away"
    try:
        while conn.recv(64):
            pass
    except socket.timeout:
        why = f"was silent for {timeout:g} s (the collective timed out)"
    except OSError:
        pass
    log(engine, f"{who} {why}: exiting")
    os._exit(1)


def wait_on_leader(engine: str, conn: socket.socket) -> None:
    _die_on_close(engine, conn, "the leader")


# --- the HTTP server --------------------------------------------------------------------------


class Engine:
    def __init__(self, engine: str, version: str, model: str, served: str, started: dict, metrics):
        self.engine, self.version, self.model, self.served = engine, version, model, served
        self.started = started  # what it was started with, echoed in every reply
        self.metrics = metrics  # () -> str, the /metrics text
        self.running = 0
        self.lock = threading.Lock()

    def reply_text(self, prompt: str) -> str:
        facts = " ".join(f"{k}={v}" for k, v in self.started.items())
        return f"stand-in {self.engine} {self.version} ({facts}) answers: {prompt}"


def _prompt_of(body: dict) -> str:
    if "messages" in body:
        msgs = body.get("messages") or []
        last = msgs[-1].get("content", "") if msgs and isinstance(msgs[-1], dict) else ""
        return last if isinstance(last, str) else json.dumps(last)
    p = body.get("prompt", "")
    return p if isinstance(p, str) else json.dumps(p)


def make_handler(eng: Engine, health_only: bool):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the tests read stderr
            pass

        def _send(self, code: int, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/health":
                return self._send(200, b"", "text/plain")
            if health_only:
                return self._send(404, {"error": "this rank serves /health only"})
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": eng.served, "object": "model", "owned_by": eng.engine, "root": eng.model}]})
            if path == "/metrics":
                return self._send(200, eng.metrics(eng).encode(), "text/plain; version=0.0.4")
            return self._send(404, {"error": f"{path}: not served by the stand-in {eng.engine}"})

        def do_POST(self):
            path = self.path.split("?")[0]
            if health_only or path not in ("/v1/chat/completions", "/v1/completions"):
                return self._send(404, {"error": f"{path}: not served"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            except ValueError:
                return self._send(400, {"error": "body is not JSON"})
            if body.get("model") not in (None, eng.served, eng.model):
                return self._send(404, {"error": f"model {body.get('model')!r} is not served here ({eng.served!r} is)"})
            with eng.lock:
                eng.running += 1
            try:
                self._complete(path, body)
            finally:
                with eng.lock:
                    eng.running -= 1

        def _complete(self, path, body):
            chat = path == "/v1/chat/completions"
            text = eng.reply_text(_prompt_of(body))
            usage = {"prompt_tokens": len(_prompt_of(body).split()), "completion_tokens": len(text.split())}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            rid = f"{'chatcmpl' if chat else 'cmpl'}-standin"
            obj = "chat.completion" if chat else "text_completion"
            if not body.get("stream"):
                choice = {"index": 0, "finish_reason": "stop"}
                choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
                return self._send(200, {"id": rid, "object": obj, "created": int(time.time()), "model": eng.served, "choices": [choice], "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            words = text.split(" ")
            for i, w in enumerate(words):
                piece = w + (" " if i < len(words) - 1 else "")
                choice = {"index": 0, "finish_reason": None}
                choice.update({"delta": {"content": piece}} if chat else {"text": piece})
                chunk = {"id": rid, "object": obj + (".chunk" if chat else ""), "model": eng.served, "choices": [choice]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            last = {"id": rid, "object": obj + (".chunk" if chat else ""), "model": eng.served,
                    "choices": [{"index": 0, "finish_reason": "stop", **({"delta": {}} if chat else {"text": ""})}]}
            if (body.get("stream_options") or {}).get("include_usage"):
                last["usage"] = usage
            self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

    return Handler


def serve(eng: Engine, host: str | None, port: int, health_only: bool = False) -> None:
    """Listen on host:port (None or "" = all interfaces, as uvicorn) until SIGTERM/SIGINT."""
    httpd = ThreadingHTTPServer((host or "", port), make_handler(eng, health_only))
    httpd.daemon_threads = True

    def stop(signum, frame):
        log(eng.engine, f"signal {signum}: shutting down")
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(eng.engine, f"{'health only' if health_only else 'serving'} on {host or '0.0.0.0'}:{port}")
    httpd.serve_forever(poll_interval=0.2)
    httpd.server_close()


def exit_on_term(engine: str) -> None:
    def stop(signum, frame):
        log(engine, f"signal {signum}: exiting")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
