"""One module per command: each assembles a frozen report from the engines' verbs and the footprint, with
no engine arithmetic of its own. Both the tables and ``--json`` are made from these reports."""

#: the version of every command's JSON
SCHEMA_VERSION = 1
