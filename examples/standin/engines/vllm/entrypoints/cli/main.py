"""STAND-IN for `python -m vllm.entrypoints.cli.main serve ARGS` (what infera.engine.vllm
spawns, and what a multi-node rank > 0 runs with --headless). See vllm/_standin.py."""
import argparse
import os
import sys

import vllm
from vllm import _standin as s
from vllm.entrypoints.openai.cli_args import make_arg_parser

E = "vllm"


def _metrics(eng):
    name = eng.served
    return (
        f'vllm:cache_config_info{{block_size="{eng.started["block_size"]}",cache_dtype="{eng.started["kv_cache_dtype"]}"}} 1.0\n'
        f'vllm:num_requests_running{{model_name="{name}"}} {float(eng.running)}\n'
        f'vllm:num_requests_waiting{{model_name="{name}"}} 0.0\n'
        f'vllm:kv_cache_usage_perc{{model_name="{name}"}} 0.0\n'
    )


def serve(argv):
    # vLLM's FlexibleArgumentParser: no abbreviations, `--a_b` read as `--a-b`.
    argv = [a.split("=", 1)[0].replace("_", "-") + ("=" + a.split("=", 1)[1] if "=" in a else "")
            if a.startswith("--") else a for a in argv]
    parser = make_arg_parser(argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False))
    args = parser.parse_args(argv)
    model = args.model_tag or args.model  # `vllm serve` takes the positional one over --model
    if not os.path.isdir(model) and os.path.sep in model:
        s.log(E, f"{model}: no such model directory")
        return 1
    # The model load: STANDIN_LOAD_SECONDS (default 0), with the signals' default actions.
    s.time.sleep(float(os.environ.get("STANDIN_LOAD_SECONDS", "0")))
    s.load_weights(E, model)
    served = (args.served_model_name or [model])[0]
    layout = {"model": model, "tp": args.tensor_parallel_size, "pp": args.pipeline_parallel_size,
              "dp": args.data_parallel_size, "kv_cache_dtype": args.kv_cache_dtype, "nnodes": args.nnodes}
    timeout = float(os.environ.get("STANDIN_RENDEZVOUS_TIMEOUT", "600"))
    started = {"model": served, "tp": args.tensor_parallel_size, "nnodes": args.nnodes,
               "kv_cache_dtype": args.kv_cache_dtype, "block_size": args.block_size or 16}
    if args.nnodes > 1 and args.node_rank > 0:
        if not args.headless:
            parser.error(f"--node-rank {args.node_rank} > 0 needs --headless (only rank 0 runs the API server)")
        s.exit_on_term(E)
        conn = s.follower_join(E, args.master_addr, args.master_port, args.node_rank, layout, timeout)
        s.wait_on_leader(E, conn)
        return 1
    if args.headless:
        parser.error("--headless is for ranks > 0 of a multi-node group (--nnodes N --node-rank R)")
    if args.nnodes > 1:
        s.exit_on_term(E)
        s.leader_rendezvous(E, args.master_port, args.nnodes, layout, timeout)
    eng = s.Engine(E, vllm.__version__, model, served, started, _metrics)
    s.serve(eng, args.host, args.port)
    return 0


def main():
    argv = sys.argv[1:]
    if not argv or argv[0] != "serve":
        print("usage: vllm serve [model_tag] [options] (the stand-in has `serve` only)", file=sys.stderr)
        return 2
    return serve(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
