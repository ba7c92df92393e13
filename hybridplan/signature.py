"""A command's typer signature, built from its option declarations (hybridplan/options.py) only when the command
runs: ``command`` and ``command_in`` register a command, ``signature`` gives it the parameters typer reads."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import typer
import typer.core

from hybridplan import startup
from hybridplan.options import Flag, Options, Param

ENGINE_LINE_HELP = (
    "Engine flags: vLLM's and SGLang's own names are read too (--tensor-parallel-size, "
    "--max-model-len, --kv-cache-dtype, --tp-size, --context-length and more), and so is a whole "
    "engine command after --: -- vllm serve MODEL [FLAGS] or -- python -m sglang.launch_server --model-path "
    "MODEL [FLAGS] (environment variables first, as you type them)."
)


class _Command(typer.core.TyperCommand):
    """A command whose usage line names a required argument as click does (LOG), not typer's {LOG}."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The help, its examples continued with a backslash where the terminal is narrower than them (copied,
        each runs as written)."""
        original = self.help
        self.help = examples_wrapped(original) if original else original
        try:
            super().format_help(ctx, formatter)
        finally:
            self.help = original


#: the columns help text is indented by where it is shown (typer's rich help)
_HELP_INDENT = 2


def examples_wrapped(text: str) -> str:
    """A docstring whose example lines (``hybridplan …``) wider than the terminal are broken between words with a
    shell continuation; other lines as they are."""
    from hybridplan.output import words, wrap_command
    from hybridplan.render import UNWRAPPED, width

    cols = min(width(), UNWRAPPED) - _HELP_INDENT
    out = []
    for line in text.splitlines():
        body = line.lstrip()
        indent = line[: len(line) - len(body)]
        if body.startswith("hybridplan ") and len(line) > cols:
            out += wrap_command(words(body), cols, indent, indent + "    ")
        else:
            out.append(line)
    return "\n".join(out)


def command(
    app: typer.Typer, *groups: tuple[Param, ...], name: str | None = None, short: str | None = None
) -> Callable[[Callable[[Options], Any]], Callable[[Options], Any]]:
    """Register ``fn(o: Options)`` as a command whose options are ``groups``, in that order; ``short`` is its
    line in the command list. typer reads the options when the command is built, after ``signature``."""

    def register(fn: Callable[[Options], Any]) -> Callable[[Options], Any]:
        def run(**values: Any) -> Any:
            startup.resume()
            return fn(Options(**values))

        run.params = tuple(p for g in groups for p in g)  # type: ignore[attr-defined]
        run.__doc__, run.__name__ = fn.__doc__, fn.__name__
        app.command(
            name=name or fn.__name__,
            short_help=short,
            cls=_Command,
            epilog=ENGINE_LINE_HELP if takes_engine_flags(run.params) else None,  # type: ignore[attr-defined]
        )(run)
        return fn

    return register


def takes_engine_flags(params: tuple[Param, ...]) -> bool:
    """Whether a command's options include one an engine line sets, so its help tells how to paste one."""
    return any(p[0] in ("tp", "ctx", "kv_dtype") for p in params)


def command_in(app: typer.Typer, target: str, *, short: str, engine_flags: bool) -> None:
    """Register the command ``module:function``, whose module holds its option groups as ``GROUPS``, without
    importing the module: it is imported when the command is built (``signature``). ``engine_flags``: what
    ``takes_engine_flags`` says of its options (tests/test_startup.py checks it)."""
    module, _, name = target.partition(":")

    def run(**values: Any) -> Any:
        startup.resume()
        return run.fn(Options(**values))  # type: ignore[attr-defined]

    run.__name__, run.target = name, target  # type: ignore[attr-defined]
    app.command(
        name=name.replace("_", "-"), short_help=short, cls=_Command, epilog=ENGINE_LINE_HELP if engine_flags else None
    )(run)


def _import_command(run: Callable[..., Any]) -> None:
    from importlib import import_module

    module, _, name = run.target.partition(":")  # type: ignore[attr-defined]
    mod = import_module(module)
    run.fn = getattr(mod, name)  # type: ignore[attr-defined]
    run.params = tuple(p for g in mod.GROUPS for p in g)  # type: ignore[attr-defined]
    run.__doc__ = run.fn.__doc__  # type: ignore[attr-defined]


def signature(run: Callable[..., Any]) -> None:
    """Give a registered command the signature typer reads, each option as ``name: type = typer.Option(...)``
    (once; the commands the CLI does not build never pay for theirs)."""
    if "__signature__" in run.__dict__:
        return
    if not hasattr(run, "params"):
        _import_command(run)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = run.params  # type: ignore[attr-defined]  # set where the command was declared
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(n, kind, default=a.decl.build(d), annotation=a.type)
            if isinstance(a, Flag)
            else inspect.Parameter(n, kind, default=d, annotation=a)
            for n, a, d in params
        ]
    )
