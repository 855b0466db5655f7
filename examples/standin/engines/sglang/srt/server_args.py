"""STAND-IN for sglang.srt.server_args: ServerArgs, a dataclass with the real sglang 0.5.23
fields, add_cli_args and from_cli_args, rebuilt from the recorded parser (sglang_parser.json)."""
import dataclasses
import json
import os
from typing import Any

from sglang._standin import add_recorded_actions

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(_HERE, "sglang_parser.json"), encoding="utf-8") as _f:
    _ACTIONS = json.load(_f)["actions"]


def _field(default):
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: json.loads(json.dumps(d)))
    return dataclasses.field(default=default)


# One field per dest (a store_true and its store_false share one; the first default wins).
_FIELDS = {}
for _a in _ACTIONS:
    if _a["dest"] != "model_path":
        _FIELDS.setdefault(_a["dest"], _a.get("default"))
_Base = dataclasses.make_dataclass("_Base", [(d, Any, _field(v)) for d, v in _FIELDS.items()])


@dataclasses.dataclass
class ServerArgs(_Base):
    model_path: Any = None

    @staticmethod
    def add_cli_args(parser):
        add_recorded_actions(parser, "sglang_parser.json")

    @classmethod
    def from_cli_args(cls, args):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(args).items() if k in names})
