"""Describe an engine's real argparse parser as JSON: what the stand-in engines of
examples/standin/engines rebuild their parsers from (flags, dest, kind, nargs, type, choices,
default of every action), built as infera's wrappers build it.

    python describe-engine-parser.py vllm|sglang OUT.json   (with the real engine importable)
"""
import argparse, json, sys


def type_name(t):
    if t is None:
        return "str"
    q = getattr(t, "__qualname__", "") or repr(t)
    if t in (int, float, str):
        return t.__name__
    if q.startswith("optional_type") or q.startswith("parse_type"):
        cells = [c.cell_contents for c in (t.__closure__ or ())]
        inner = next((c for c in cells if callable(c)), None)
        return ("optional:" if q.startswith("optional_type") else "") + type_name(inner)
    if "parse_dataclass" in q:
        return "json-object"
    if q == "loads":
        return "json"
    if q == "union_dict_and_str":
        return "json-or-str"
    if q in ("human_readable_int", "human_readable_int_or_auto"):
        return q.replace("_", "-")
    return "str"


def kind(a):
    n = type(a).__name__
    return {
        "_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
        "BooleanOptionalAction": "bool", "_AppendAction": "append", "_StoreConstAction": "store_const",
        "_CountAction": "count", "_HelpAction": "help",
    }.get(n, "store")


def jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return None


def describe(parser):
    out = []
    for a in parser._actions:
        k = kind(a)
        if k == "help":
            continue
        d = {"flags": list(a.option_strings), "dest": a.dest, "kind": k}
        if a.option_strings == []:
            d["positional"] = True
        if k in ("store", "append"):
            d["nargs"] = a.nargs
            d["type"] = type_name(a.type)
        if a.choices is not None:
            d["choices"] = [c for c in a.choices if isinstance(c, (str, int))]
        if k == "store_const":
            d["const"] = jsonable(a.const)
        d["default"] = jsonable(a.default)
        out.append(d)
    return out


which = sys.argv[1]
if which == "vllm":
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    import vllm
    # As infera.engine.vllm builds it (infera/engine/vllm/args.py).
    p = make_arg_parser(argparse.ArgumentParser(add_help=False, allow_abbrev=False))
    doc = {"engine": "vllm", "version": vllm.__version__,
           "built": "vllm.entrypoints.openai.cli_args.make_arg_parser(argparse.ArgumentParser(add_help=False, allow_abbrev=False)), as infera.engine.vllm builds it"}
else:
    from sglang.srt.server_args import ServerArgs
    import sglang
    p = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(p)
    doc = {"engine": "sglang", "version": sglang.__version__,
           "built": "ServerArgs.add_cli_args(argparse.ArgumentParser(add_help=False)), as infera.engine.sglang builds it"}
doc["allow_abbrev"] = p.allow_abbrev
doc["actions"] = describe(p)
json.dump(doc, open(sys.argv[2], "w"), indent=1, sort_keys=True)

