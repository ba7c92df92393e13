"""`--csv`: a command's table as CSV on stdout (Python's csv module, a header row). Each report names its columns
and gives its rows (``csv_columns``, ``csv_rows``); numbers go as numbers, without thousands separators, the
unit is in the column's name, a missing figure is an empty field and a yes/no is ``true``/``false`` (as the
command's --json writes it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hybridplan.errors import PlanError
from hybridplan.options import Flag, option, param

CSV = (
    param(
        "as_csv",
        Flag(
            bool,
            option(
                "--csv",
                help="Print the table as CSV (a header row, numbers as numbers, units in the column names) and "
                "nothing else.",
            ),
        ),
        False,
    ),
)


def refuse_with_json(as_csv: bool, as_json: bool) -> None:
    if as_csv and as_json:
        raise PlanError("--csv and --json both print the result: give one of them")


def cell(value: object) -> object:
    """A value as its CSV field: booleans as JSON spells them, None as an empty field."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return value


def to_csv(columns: Sequence[str], rows: Iterable[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: cell(r[k]) for k in columns})
    return buf.getvalue()
