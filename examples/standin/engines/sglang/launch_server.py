"""STAND-IN for `python -m sglang.launch_server ARGS` (what infera.engine.sglang spawns).
Rank 0 serves the API once every rank joined --dist-init-addr; ranks > 0 answer /health only,
as sglang's node_rank >= 1 does. See sglang/_standin.py."""
import argparse
import os
import sys

import sglang
from sglang import _standin as s
from sglang.srt.server_args import ServerArgs

E = "sglang"


def _metrics(eng):
    return (f'sglang:num_running_reqs{{model_name="{eng.served}",tp_rank="0"}} {float(eng.running)}\n'
            f'sglang:num_queue_reqs{{model_name="{eng.served}",tp_rank="0"}} 0.0\n'
            f'sglang:token_usage{{model_name="{eng.served}",tp_rank="0"}} 0.0\n')


def main(argv):
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    a = ServerArgs.from_cli_args(parser.parse_args(argv))
    if not a.model_path:
        parser.error("--model-path is required")
    if not os.path.isdir(a.model_path) and os.path.sep in a.model_path:
        s.log(E, f"{a.model_path}: no such model directory")
        return 1
    # The model load: STANDIN_LOAD_SECONDS (default 0), with the signals' default actions.
    s.time.sleep(float(os.environ.get("STANDIN_LOAD_SECONDS", "0")))
    s.load_weights(E, a.model_path)
    layout = {"model": a.model_path, "tp": a.tp_size, "pp": a.pp_size, "dp": a.dp_size,
              "kv_cache_dtype": a.kv_cache_dtype, "nnodes": a.nnodes}
    timeout = float(os.environ.get("STANDIN_RENDEZVOUS_TIMEOUT", "600"))
    started = {"model": a.served_model_name or a.model_path, "tp": a.tp_size, "nnodes": a.nnodes,
               "kv_cache_dtype": a.kv_cache_dtype, "disaggregation_mode": a.disaggregation_mode}
    eng = s.Engine(E, sglang.__version__, a.model_path, a.served_model_name or a.model_path, started, _metrics)
    if a.nnodes > 1:
        if not a.dist_init_addr or a.dist_init_addr.count(":") != 1:
            parser.error(f"--nnodes {a.nnodes} needs --dist-init-addr HOST:PORT, got {a.dist_init_addr!r}")
        host, port = a.dist_init_addr.rsplit(":", 1)
        s.exit_on_term(E)
        if a.node_rank == 0:
            s.leader_rendezvous(E, int(port), a.nnodes, layout, timeout)
        else:
            conn = s.follower_join(E, host, int(port), a.node_rank, layout, timeout)
            import threading
            threading.Thread(target=s.wait_on_leader, args=(E, conn), daemon=True).start()
            s.serve(eng, a.host, a.port, health_only=True)
            return 0
    s.serve(eng, a.host, a.port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
