"""One module per command: each assembles a frozen report from the engines' verbs and the footprint, with
no engine arithmetic of its own. Both the tables and ``--json`` are made from these reports."""

#: the version of every command's JSON (docs/schema/<command>.json describes each)
SCHEMA_VERSION = 1
#: the commands whose JSON changed since version 1: check-log 2 (values typed, the unit in a setting's name, the
#: printed text beside), speed 2 (bytes whole, every engine's benchmark under ``benches``), speed 3 (the held-out
#: range beside each benchmark figure, the host and draft times; the efficiency's fixed costs split by engine)
#: plan 2 (each plan's held-out tok/s range, ``decode_range``)
SCHEMA_VERSIONS = {"check-log": 2, "speed": 3, "plan": 2}


def schema_version(command: str) -> int:
    return SCHEMA_VERSIONS.get(command, SCHEMA_VERSION)
