"""Engine flags typed among hybridplan's options, and a pasted engine command line (after ``--``), turned into the
command's own options before its parser reads them (hybridplan/cmdline.py reads the engines' lines)."""

from __future__ import annotations

from typing import Any

from hybridplan.errors import PlanError


def _own_flags(cmd: Any) -> dict[str, bool]:
    """A command's flags → whether each takes a value."""
    own: dict[str, bool] = {"--help": False, "-h": False}
    for p in cmd.params:
        if getattr(p, "param_type_name", None) == "option":
            for name in (*p.opts, *p.secondary_opts):
                own[name] = not (p.is_flag or p.count)
    return own


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _release_asked(head: list[str]) -> dict[str, str | None]:
    """The releases --vllm-version / --sglang-version name among hybridplan's options, resolved as the
    engines' release tables resolve them (a pasted line is read by that release's parser)."""
    asked: dict[str, str | None] = {}
    for i, token in enumerate(head):
        for flag, engine in (("--vllm-version", "vllm"), ("--sglang-version", "sglang")):
            value = None
            if token == flag and i + 1 < len(head):
                value = head[i + 1]
            elif token.startswith(flag + "="):
                value = token.split("=", 1)[1]
            if value is None:
                continue
            try:
                from hybridplan.engines.sglang import releases as sglang_releases
                from hybridplan.engines.vllm import releases as vllm_releases

                asked[engine] = (vllm_releases if engine == "vllm" else sglang_releases).release(value).version
            except PlanError:
                pass  # refused where the option is read
    return asked


def expand(cmd: Any, args: list[str]) -> tuple[list[str], list[str]]:
    """A command's arguments with engine flags (vLLM's and SGLang's own names, typed among hybridplan's) and a
    pasted engine line (after ``--``) turned into hybridplan's options (hybridplan/cmdline.py), for the parser
    to read and check as if typed; and the lines to say what was set aside. A pasted line is read as the
    engine's own parser reads it at the release asked (--vllm-version / --sglang-version, else the newest);
    an unknown flag is refused here, with the closest name among hybridplan's and the engines'. The flags with
    no effect on memory are kept (``--engine-arg``) for the command the report prints. The engines' flag tables
    load only for a line that has a flag the command does not own, or a pasted engine line."""
    own = _own_flags(cmd)
    head, tail = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, None)
    out: list[str] = []
    engine_tokens: list[str] = []
    positional: list[str] = []
    i = 0
    while i < len(head):
        token = head[i]
        name = token.split("=", 1)[0] if token.startswith("--") else token
        if not _is_flag(token):
            out.append(token)
            positional.append(token)
        elif name in own:
            out.append(token)
            if own[name] and "=" not in token and i + 1 < len(head):
                i += 1
                out.append(head[i])
        else:
            from hybridplan import cmdline

            engine_tokens.append(token)
            if cmdline.takes_value(token) and i + 1 < len(head):
                i += 1
                engine_tokens.append(head[i])
        i += 1
    lines = []
    versions = _release_asked(head) if engine_tokens or tail is not None else {}
    if engine_tokens or tail is not None:
        from hybridplan import cmdline

        try:
            lines = [cmdline.translate(engine_tokens, "either", versions=versions)] if engine_tokens else []
        except PlanError as exc:
            if str(exc).startswith("no such option: "):
                name = str(exc)[len("no such option: ") :].split(" ", 1)[0]
                raise PlanError(
                    f"no such option: {name}{cmdline.closest(name, [*own, *cmdline.engine_flag_names()])}"
                ) from None
            raise
    if tail is not None:
        if not tail:
            raise PlanError("nothing after --: paste the engine's command, e.g. -- vllm serve MODEL …")
        lines.append(cmdline.translate(tail, ours=own, versions=versions))
    notes: list[str] = []
    set_by_head = {t.split("=", 1)[0] for t in out if _is_flag(t)}
    dropped: list[str] = []
    # where the model stands among the command's arguments (`replay TRACE MODEL`: second)
    arguments = [p.name for p in cmd.params if getattr(p, "param_type_name", None) == "argument"]
    at = arguments.index("model") if "model" in arguments else 0
    for line in lines:
        if line.model is not None:
            model_is_option = "--model" in own
            if model_is_option:
                out += ["--model", line.model]
            elif len(positional) > at and positional[at] != line.model:
                raise PlanError(f"two models: {positional[at]} and the engine line's {line.model}")
            elif len(positional) == at:  # the pasted line's model is the model (after a TRACE, say)
                out.append(line.model)
                positional.append(line.model)
        if line.engine is not None and "--engine" in own and "--engine" not in set_by_head:
            out += ["--engine", line.engine]
            set_by_head.add("--engine")
        for shown, tokens in line.options:
            if not tokens:
                continue
            flag = tokens[0]
            if flag not in own:
                dropped.append(shown)
                continue
            if flag in set_by_head and flag not in ("--sglang-env", "--enforce-eager", "--allow-long-context"):
                raise PlanError(f"{shown}: {flag} is given twice; give it once")
            out += list(tokens)
            set_by_head.add(flag)
        if "--engine-arg" in own:
            import json

            for engine, words, _ in line.kept:
                out += ["--engine-arg", f"{engine}={json.dumps(list(words))}"]
        if line.ignored:
            said: dict[str, list[str]] = {}
            for shown, why in zip(line.ignored, line.why or ("no effect on memory",) * len(line.ignored)):
                said.setdefault(why, []).append(shown)
            notes += [f"ignored: {', '.join(flags)}: {why}" for why, flags in said.items()]
    if dropped:
        notes.append(f"ignored: {cmd.name} does not use " + ", ".join(dropped))
    return out, notes
