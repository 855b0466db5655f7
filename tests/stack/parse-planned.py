#!/usr/bin/env python3
"""Parse the argv infera-exec plans with the REAL parser of the module it execs.

Reads a JSON list on stdin: [{"what": LABEL, "argv": [...]}] where argv is a planned exec argv
(`PYTHON -m MODULE ARGS…`, or `PYTHON -c FOLLOWER ARGS…` for a vLLM rank > 0). Each is parsed
in this interpreter by the real Infera sources (the overlay tree on sys.path) — the router's
`parse_server_args`, `infera.engine.vllm.args.parse_vllm_args`,
`infera.engine.sglang.args.parse_sglang_args` — whose engine parsers are the stand-in engines'
(the real vLLM/sglang parsers' recorded options, examples/standin/engines), and for a vLLM
follower also vLLM's own `serve` parser on what the wrapper passes on. Prints `parsed: LABEL`
per argv; a refusal prints `REFUSED: LABEL: …` and the exit status is 1.

    PYTHONPATH=TREE:ENGINES python3 tests/stack/parse-planned.py < planned.json
"""
import argparse
import contextlib
import io
import json
import sys


def parse(argv):
    if argv[1] == "-c":
        from infera.engine.vllm.args import parse_vllm_args
        from vllm.entrypoints.openai.cli_args import make_arg_parser

        a = parse_vllm_args(argv[3:])
        make_arg_parser(argparse.ArgumentParser(allow_abbrev=False)).parse_args(a.vllm_argv)
        return "vllm follower"
    assert argv[1] == "-m", argv
    module, args = argv[2], argv[3:]
    if module == "infera.server":
        from infera.server.args import parse_server_args

        parse_server_args(args)
    elif module == "infera.engine.vllm":
        from infera.engine.vllm.args import parse_vllm_args

        parse_vllm_args(args)
    elif module == "infera.engine.sglang":
        from infera.engine.sglang.args import parse_sglang_args

        parse_sglang_args(args)
    else:
        return f"{module}: no parser to check here"
    return module


def main():
    status = 0
    for item in json.load(sys.stdin):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                what = parse(item["argv"])
            print(f"parsed: {item['what']} ({what})")
        except SystemExit as e:
            print(f"REFUSED: {item['what']}: exit {e.code}: {err.getvalue().strip()[-600:]}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
