#!/usr/bin/env python3
"""Print the long option strings of infera's parsers, from the real modules: the router's
(infera.server) or an engine wrapper's own (infera.engine.vllm|sglang), one per line, sorted:
the lists crates/infera-facts/src/engines/options/infera.*.txt record.

    PYTHONPATH=<infera tree>[:<engine>] python infera-option-names.py [--flags] infera.server|infera.engine.vllm|infera.engine.sglang

With --flags, only the options that take no value (nargs 0: store_true and the like); with
--defaults, each option whose default is a string as OPTION=DEFAULT (the transports, the
discovery backend: what crates/infera-facts/src/engines records as the wrappers' defaults).

Each module's parse function is called with argparse's parse methods replaced: the first
parser asked to parse is the module's own (a wrapper hands what it does not know to the
engine's parser afterwards), and its option strings are printed instead.
"""
import argparse
import sys


class Captured(Exception):
    pass


flags = "--flags" in sys.argv[1:]
defaults = "--defaults" in sys.argv[1:]


def capture(parser):
    actions = parser._option_string_actions
    if defaults:
        raise Captured(sorted(
            f"{s}={a.default}" for s, a in actions.items() if s.startswith("--") and isinstance(a.default, str)
        ))
    raise Captured(sorted(
        s for s, a in actions.items() if s.startswith("--") and s != "--help" and (not flags or a.nargs == 0)
    ))


which = [a for a in sys.argv[1:] if a not in ("--flags", "--defaults")][0]
# The first parser a module parses with is its own (a wrapper hands the rest to the engine's).
argparse.ArgumentParser.parse_args = lambda self, *a, **k: capture(self)
argparse.ArgumentParser.parse_known_args = lambda self, *a, **k: capture(self)
try:
    if which == "infera.server":
        from infera.server.args import parse_server_args as parse
    elif which == "infera.engine.vllm":
        from infera.engine.vllm.args import parse_vllm_args as parse
    else:
        from infera.engine.sglang.args import parse_sglang_args as parse
    parse([])
except Captured as c:
    print("\n".join(c.args[0]))
else:
    sys.exit("no parser was asked to parse")
