"""STAND-IN for vllm.entrypoints.openai.cli_args (vLLM 0.4.1–0.28): make_arg_parser adds the
real vLLM 0.28.0 `serve` options, rebuilt from their recorded actions (vllm/vllm_parser.json)."""
from vllm._standin import add_recorded_actions


def make_arg_parser(parser):
    return add_recorded_actions(parser, "vllm_parser.json")
