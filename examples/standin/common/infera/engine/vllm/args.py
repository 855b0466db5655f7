"""STAND-IN for infera.engine.vllm.args: parse_vllm_args, as a vLLM rank > 0 calls it (the
launcher's follower program), reports its argv and environment, then exits."""
from infera._standin import main


def parse_vllm_args(argv=None):
    main("infera.engine.vllm.args")
