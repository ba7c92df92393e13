"""hybridplan from Python: each command as a function that returns its report.

    >>> from hybridplan import api
    >>> report = api.fit("nemotron-h", ctx=8192, kv_budget="40GiB")
    >>> report.to_dict()["vllm"]["modes"]["align"]["kv_tokens"]
    793993

A function takes what its command takes: the positional arguments (MODEL, TRACE, LOG) in order, every option
as a keyword named as the option (``--kv-budget`` is ``kv_budget``; a switch is ``True``), and an engine command
line as a list (``engine_line=["vllm", "serve", MODEL, "--max-model-len", "8192"]``). The values are read and
checked by the command's own options, so a function accepts and refuses exactly what the command does: bad
input raises ``hybridplan.errors.PlanError`` (or ``ValueError`` for an option the command does not have) with
the line the command would print. The report's ``to_dict()`` is what ``--json`` prints (docs/api.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hybridplan.errors import PlanError
from hybridplan.show import Captured, capturing

__all__ = ["size", "fit", "prefix", "replay", "speed", "plan", "check_log", "crossover", "PlanError"]


def _tokens(cmd: Any, positional: Sequence[Any], options: dict[str, Any]) -> list[str]:
    """The command line that says what the call says, through the command's own option names."""
    # (typer vendors its own click: the parameters are told apart by their kind, not their class)
    by_name = {p.name: p for p in cmd.params}
    args = [str(a) for a in positional]
    for key, value in options.items():
        p = by_name.get(key)
        if p is None or p.param_type_name != "option" or key == "as_json":
            known = sorted(n for n, q in by_name.items() if q.param_type_name == "option" and n != "as_json")
            raise ValueError(f"{cmd.name}() takes no option {key!r} (its options: {', '.join(known)})")
        if value is None:
            continue
        if p.is_flag and not p.secondary_opts:
            if value is True:
                args.append(p.opts[0])
            elif value is not False:
                raise ValueError(f"{cmd.name}(): {key} is a switch: True or False, got {value!r}")
        elif p.is_flag:
            args.append(p.opts[0] if value else p.secondary_opts[0])
        else:
            for item in value if isinstance(value, (list, tuple)) else (value,):
                args += [p.opts[0], str(item)]
    return args


def run(command: str, *positional: Any, engine_line: Sequence[str] | None = None, **options: Any) -> Any:
    """Run ``hybridplan COMMAND`` with these arguments and return its report (the object ``--json``
    serialises)."""
    from hybridplan import cli

    group = cli._command_group([command])
    cmd = group.commands.get(command)
    if cmd is None:
        raise ValueError(f"no command {command!r} (commands: {', '.join(sorted(group.commands))})")
    args = [command, *_tokens(cmd, positional, options)]
    if engine_line:
        args += ["--", *map(str, engine_line)]
    args, _notes = cli._engine_flags(args, group)
    token = capturing.set(True)
    try:
        group.main(args=args, standalone_mode=False, prog_name="hybridplan")
    except Captured as done:
        return done.report
    except cli._UsageError as exc:
        raise PlanError(exc.format_message()) from None
    finally:
        capturing.reset(token)
        from hybridplan.build import said

        said()  # the notes the command line prints after its output (a default MODEL): not kept between calls
    raise PlanError(f"{command} gave no report")


def size(model: str | None = None, **options: Any) -> Any:
    return run("size", *([model] if model else []), **options)


def crossover(model: str | None = None, **options: Any) -> Any:
    return run("crossover", *([model] if model else []), **options)


def fit(model: str | None = None, **options: Any) -> Any:
    return run("fit", *([model] if model else []), **options)


def prefix(model: str | None = None, **options: Any) -> Any:
    return run("prefix", *([model] if model else []), **options)


def speed(model: str | None = None, **options: Any) -> Any:
    return run("speed", *([model] if model else []), **options)


def plan(model: str | None = None, **options: Any) -> Any:
    return run("plan", *([model] if model else []), **options)


def replay(trace: str, model: str | None = None, **options: Any) -> Any:
    return run("replay", trace, *([model] if model else []), **options)


def check_log(log: str, **options: Any) -> Any:
    return run("check-log", log, **options)
