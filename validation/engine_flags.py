"""The engines' flag tables, read from their wheels' argument definitions.

For each vLLM release 0.10.0–0.33.0 and SGLang release 0.5.2–0.5.23 that hybridplan models, this reads the files
that define the engine's command line straight out of the wheel (``zipfile``, nothing installed, nothing
imported) and parses them with ``ast``:

- vLLM: ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args`` / ``AsyncEngineArgs.add_cli_args``), the config
  dataclasses whose fields ``get_kwargs`` turns into flags (``vllm/config.py`` or ``vllm/config/*.py``), the
  frontend's (``vllm/entrypoints/openai/cli_args.py`` to 0.28, ``vllm/entrypoints/launchers/cli_args.py``
  0.29-0.32, ``vllm/entrypoints/common/cli_args.py`` 0.33), and
  ``FlexibleArgumentParser`` (``vllm/utils/__init__.py`` or ``vllm/utils/argparse_utils.py``) for how it
  rewrites a line before argparse reads it;
- SGLang: ``sglang/srt/server_args.py`` (``ServerArgs.add_cli_args`` and ``prepare_server_args``).

A field's flag follows the release's own ``_compute_kwargs`` rules: a dataclass-typed field takes JSON, a
``bool | str | None`` field an optional value, a ``bool`` one is a ``--x/--no-x`` pair
(``argparse.BooleanOptionalAction``), a ``Literal`` gives the choices (a ``metavar`` instead when ``str`` is in the
union too), ``list``/``tuple``/``set`` take several values (``nargs``), the rest one value. Keywords given in the
``add_argument`` call, and the kwargs the function changes by hand (``kwargs["f"]["nargs"] = ...``, ``del``),
override those.

It writes hybridplan/engines/vllm/flags.json and hybridplan/engines/sglang/flags.json: per flag, each run of
releases it exists in with the same definition (``from``/``to``), its other names, what it takes (``switch``:
nothing; ``bool``: nothing, and a ``--no-`` form; ``value``: one word; ``optional``: one word or none;
``list``: ``nargs`` words), and its choices; the header holds every wheel's file name and sha256, and what the
release's parser does to a line (``parser``).

    python validation/engine_flags.py                    # regenerate both tables from /tmp/wheels
    python validation/engine_flags.py --check            # regenerate and compare with the committed tables
    python validation/engine_flags.py --engine sglang --download --check
    python validation/engine_flags.py --engine vllm --releases 0.10.0,0.33.0 --check

Wheels are looked for as /tmp/wheels/<engine>-<version>/*.whl (``--wheels`` to change), and fetched with
``pip download --no-deps`` under ``flock /tmp/wheels/.lock`` with ``--download``. ``--check`` with
``--releases`` compares those releases' rows of the committed table only, and says so.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = {"vllm": ROOT / "hybridplan/engines/vllm/flags.json", "sglang": ROOT / "hybridplan/engines/sglang/flags.json"}


class Unreadable(Exception):
    """A definition this reader does not understand: it stops rather than guess."""


def releases(engine: str) -> tuple[str, ...]:
    if engine == "vllm":
        from hybridplan.engines.vllm.releases import VERSIONS
    else:
        from hybridplan.engines.sglang.releases import VERSIONS
    return tuple(VERSIONS)


# --- wheels -----------------------------------------------------------------------------------------------


def wheel_path(engine: str, version: str, wheels: Path, download: bool) -> Path:
    folder = wheels / f"{engine}-{version}"
    found = sorted(folder.glob("*.whl"))
    if not found and download:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "flock",
                str(wheels / ".lock"),
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                f"{engine}=={version}",
                "-d",
                str(folder),
            ],
            check=True,
        )
        found = sorted(folder.glob("*.whl"))
    if not found:
        raise FileNotFoundError(f"no wheel for {engine} {version} in {folder} (give --download)")
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _wanted(engine: str, name: str) -> bool:
    if engine == "sglang":
        return name == "sglang/srt/server_args.py" or (
            name.startswith("sglang/srt/arg_groups/") and name.endswith(".py")
        )
    return name in (
        "vllm/config.py",
        "vllm/engine/arg_utils.py",
        "vllm/entrypoints/openai/cli_args.py",
        "vllm/entrypoints/common/cli_args.py",
        "vllm/entrypoints/launchers/cli_args.py",
        "vllm/utils/__init__.py",
        "vllm/utils/argparse_utils.py",
    ) or (name.startswith("vllm/config/") and name.endswith(".py"))


def sources(engine: str, wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode() for n in z.namelist() if _wanted(engine, n)}


# --- what a definition says ---------------------------------------------------------------------------------


def _const(node: ast.AST, names: dict[str, ast.AST], depth: int = 0):
    """A literal value, following module-level names; raises Unreadable otherwise."""
    if depth > 8:
        raise Unreadable("too deep")
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                out += list(_const(e.value, names, depth + 1))
            else:
                out.append(_const(e, names, depth + 1))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return list(_const(node.left, names, depth + 1)) + list(_const(node.right, names, depth + 1))
    if isinstance(node, ast.Name) and node.id in names:
        return _const(names[node.id], names, depth + 1)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("list", "sorted", "tuple")
        and node.args
    ):
        return list(_const(node.args[0], names, depth + 1))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "keys":
        value = _const(node.func.value, names, depth + 1)
        if isinstance(value, dict):
            return list(value)
    if isinstance(node, ast.Dict):
        return {_const(k, names, depth + 1): None for k in node.keys if k is not None}
    raise Unreadable(ast.unparse(node))


def _module_names(trees: list[ast.Module]) -> dict[str, ast.AST]:
    """Module-level ``NAME = value`` and ``NAME: T = value`` (type aliases included)."""
    names: dict[str, ast.AST] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                names.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                names.setdefault(node.target.id, node.value)
            elif type(node).__name__ == "TypeAlias":
                names.setdefault(node.name.id, node.value)  # type: ignore[attr-defined]
    return names


def _shape(kw: dict[str, ast.AST], names: dict[str, ast.AST], where: str) -> dict:
    """What an argparse definition takes, from its keywords."""
    action = kw.get("action")
    act = None
    if action is not None:
        act = action.value if isinstance(action, ast.Constant) else ast.unparse(action)
    nargs = None
    if "nargs" in kw:
        nargs = _const(kw["nargs"], names)
    choices = None
    if "choices" in kw and kw["choices"] is not None:
        try:
            choices = sorted({str(c) for c in _const(kw["choices"], names) if c is not None})
        except Unreadable:
            choices = "dynamic"  # built at run time (a registry of plugins): no fixed list
    if act in ("store_true", "store_false", "store_const", "count", "help", "version"):
        return {"takes": "switch"}
    if act in ("argparse.BooleanOptionalAction", "BooleanOptionalAction"):
        return {"takes": "bool"}
    if act is not None and act not in ("store", "append", "extend") and act not in CUSTOM_ACTIONS:
        raise Unreadable(f"{where}: action {act}")
    if act in CUSTOM_ACTIONS and CUSTOM_ACTIONS[act] == "switch" and nargs is None:
        return {"takes": "switch"}
    if nargs in (None,) or nargs == 1 and False:
        out: dict = {"takes": "value"}
    elif nargs == "?":
        out = {"takes": "optional"}
    elif nargs == 0:
        return {"takes": "switch"}
    else:
        out = {"takes": "list", "nargs": nargs}
    if act in ("append", "extend"):
        out["repeat"] = True
    if choices is not None:
        out["choices"] = choices
    return out


#: argparse actions the engines define, and what each takes when no nargs is given
CUSTOM_ACTIONS = {
    "DeprecatedAction": "switch",  # SGLang: nargs=0, warns (server_args.py)
    "DeprecatedStoreTrueAction": "switch",  # SGLang 0.5.2x: nargs=0 (arg_groups/argparse_actions.py)
    "DeprecatedStoreConstAction": "switch",  # SGLang 0.5.2x: nargs=0
    "DeprecatedAliasStoreAction": "value",  # SGLang 0.5.14+: an old name storing into the new one
    "LoRAPathAction": "value",  # SGLang: nargs="*" at its use
    "LoRAParserAction": "value",  # vLLM frontend --lora-modules (nargs="+")
    "DeprecatedLogConfigFileAction": "value",  # vLLM 0.3x --log-config-file
    "StoreBoolean": "value",
}


# --- SGLang -------------------------------------------------------------------------------------------------


def _sglang_fields(
    tree: ast.Module, trees: list[ast.Module], names: dict[str, ast.AST], flags: dict[str, dict]
) -> None:
    """0.5.14+: the flags ``add_cli_args_from_dataclass`` makes from ``A[T, Arg(...)]`` fields
    (sglang/srt/arg_groups/arg_utils.py): ServerArgs's own, and from 0.5.20 those of the namespaces in
    ``_INPUT_NAMESPACES`` (sglang/srt/arg_groups/fields/*.py)."""
    classes = _classes(trees)
    wanted = ["ServerArgs"]
    ns = names.get("_INPUT_NAMESPACES")
    if isinstance(ns, ast.List):
        wanted += [e.id for e in ns.elts if isinstance(e, ast.Name)]
    for cname in wanted:
        cls = (
            next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cname), None)
            if cname == "ServerArgs"
            else classes.get(cname)
        )
        if cls is None:
            raise Unreadable(f"sglang: no class {cname}")
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            ann = node.annotation
            if not (isinstance(ann, ast.Subscript) and _head(ann) in ("A", "Annotated")):
                continue
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            meta = next(
                (
                    p
                    for p in parts[1:]
                    if isinstance(p, ast.Constant)
                    and isinstance(p.value, str)
                    or isinstance(p, ast.Call)
                    and ast.unparse(p.func) == "Arg"
                ),
                None,
            )
            if meta is None:
                continue
            arg = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
            if "no_cli" in arg and isinstance(arg["no_cli"], ast.Constant) and arg["no_cli"].value:
                continue
            field = node.target.id
            cli = _const(arg["cli_name"], names) if "cli_name" in arg else "--" + field.replace("_", "-")
            opts = [cli, *(_const(arg["aliases"], names) if "aliases" in arg else [])]
            inner = parts[0]
            hints = [h for h in _hints(inner, names) if _head(h) != "None"]
            kw: dict[str, ast.AST] = {}
            if "action" in arg and not (isinstance(arg["action"], ast.Constant) and arg["action"].value is None):
                kw["action"] = arg["action"]
                extra = arg.get("action_kwargs")
                if isinstance(extra, ast.Dict):
                    for dk, dv in zip(extra.keys, extra.values):
                        if isinstance(dk, ast.Constant) and dk.value in ("nargs", "choices"):
                            kw[dk.value] = dv
            elif len(hints) == 1 and _head(hints[0]) == "Literal":
                kw["choices"] = arg.get("choices") or ast.List([ast.Constant(v) for v in _literals(hints[0], names)])
            elif len(hints) == 1 and _head(hints[0]) in ("list", "List") and "type_parser" not in arg:
                kw["nargs"] = arg.get("nargs") or ast.Constant("+")
                if "choices" in arg:
                    kw["choices"] = arg["choices"]
            elif len(hints) == 1 and _head(hints[0]) == "bool":
                kw["action"] = ast.Constant("store_true")
            else:
                for k in ("choices", "nargs"):
                    if k in arg and not (isinstance(arg[k], ast.Constant) and arg[k].value is None):
                        kw[k] = arg[k]
            entry = _shape(kw, names, cli)
            _put(flags, opts, entry)


def sglang_flags(src: dict[str, str]) -> tuple[dict[str, dict], dict]:
    text = src["sglang/srt/server_args.py"]
    tree = ast.parse(text)
    others = [ast.parse(t) for n, t in src.items() if n != "sglang/srt/server_args.py"]
    names = _module_names([tree, *others])
    flags: dict[str, dict] = {}
    if "add_cli_args_from_dataclass(parser, ServerArgs)" in text:
        _sglang_fields(tree, [tree, *others], names, flags)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
            continue
        opts = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if len(opts) != len(node.args) or not opts:
            raise Unreadable(f"sglang: {ast.unparse(node)[:100]}")
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if any(k.arg is None for k in node.keywords):
            raise Unreadable(f"sglang: **kwargs in {ast.unparse(node)[:100]}")
        entry = _shape(kw, names, opts[0])
        if "deprecated" in kw or (kw.get("action") is not None and "Deprecated" in ast.unparse(kw["action"])):
            entry["deprecated"] = True
        _put(flags, opts, entry)
    prep = re.search(r"def prepare_server_args.*?(?=\ndef |\Z)", text, re.S)
    if prep is None:
        raise Unreadable("sglang: no prepare_server_args")
    parser = {"allow_abbrev": "allow_abbrev=False" not in prep.group(0), "config_file": '"--config"' in prep.group(0)}
    return flags, parser


def _put(flags: dict[str, dict], opts: list[str], entry: dict) -> None:
    opts = [o for o in opts if o.startswith("-")]
    if not opts:
        return  # a positional (vllm serve's model_tag)
    longs = [o for o in opts if o.startswith("--")]
    key = longs[0] if longs else opts[0]
    entry = {"names": sorted(o for o in opts if o != key), **entry}
    if not entry["names"]:
        del entry["names"]
    if key in flags and flags[key] != entry:
        # defined twice (a release that adds it in two places): keep both shapes' union, first one wins
        return
    flags[key] = entry


# --- vLLM ---------------------------------------------------------------------------------------------------


def _classes(trees: list[ast.Module]) -> dict[str, ast.ClassDef]:
    out: dict[str, ast.ClassDef] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, node)
    return out


def _fields(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], seen=()) -> list[tuple[str, ast.AST, ast.AST]]:
    """A dataclass's fields in order, its bases' first: (name, annotation, the default or field(...))."""
    out: list[tuple[str, ast.AST, ast.AST]] = []
    for base in cls.bases:
        bname = base.id if isinstance(base, ast.Name) else None
        if bname in classes and bname not in seen:
            out += _fields(classes[bname], classes, (*seen, cls.name))
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            ann = ast.unparse(node.annotation)
            if ann.startswith(("ClassVar", "InitVar")) or "ClassVar[" in ann:
                continue
            if (
                isinstance(node.value, ast.Call)
                and "field" in ast.unparse(node.value.func)
                and any(
                    k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in node.value.keywords
                )
            ):
                continue
            out = [f for f in out if f[0] != node.target.id]
            out.append((node.target.id, node.annotation, node.value))
    return out


def _is_dataclass(name: str, classes: dict[str, ast.ClassDef]) -> bool:
    cls = classes.get(name)
    if cls is None:
        return False
    decos = " ".join(ast.unparse(d) for d in cls.decorator_list)
    return "dataclass" in decos or "config" in decos


def _hints(node: ast.AST, names: dict[str, ast.AST], depth: int = 0) -> list[ast.AST]:
    """A type annotation as the set of types its union holds (``get_type_hints``: Annotated and unions flattened,
    aliases followed)."""
    if depth > 10:
        raise Unreadable(ast.unparse(node))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _hints(ast.parse(node.value, mode="eval").body, names, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _hints(node.left, names, depth + 1) + _hints(node.right, names, depth + 1)
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Optional":
            return _hints(inner[0], names, depth + 1) + [ast.Constant(None)]
        if head == "Union":
            return [h for e in inner for h in _hints(e, names, depth + 1)]
        if head == "Annotated":
            return _hints(inner[0], names, depth + 1)
        return [node]
    if isinstance(node, ast.Name) and node.id in names:
        target = names[node.id]
        if isinstance(target, (ast.Subscript, ast.BinOp, ast.Name, ast.Constant)) and not (
            isinstance(target, ast.Constant) and not isinstance(target.value, str)
        ):
            return _hints(target, names, depth + 1)
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("TypeAliasType") and len(node.args) > 1:
        return _hints(node.args[1], names, depth + 1)
    return [node]


def _head(node: ast.AST) -> str:
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value).split(".")[-1]
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    return ast.unparse(node).split(".")[-1]


def _literals(node: ast.Subscript, names: dict[str, ast.AST]) -> list:
    inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    out: list = []
    for e in inner:
        while isinstance(e, ast.Name) and e.id in names and isinstance(names[e.id], ast.Subscript):
            e = names[e.id]  # a Literal of Literal aliases
        if isinstance(e, ast.Subscript) and _head(e) == "Literal":
            out += _literals(e, names)
        else:
            out.append(_const(e, names))
    return out


def _field_kwargs(
    ann: ast.AST, names: dict[str, ast.AST], classes: dict[str, ast.ClassDef], rules: set[str], where: str
) -> dict:
    """argparse's keywords for a dataclass field, as the release's ``_compute_kwargs`` makes them (only what
    decides what the flag takes)."""
    hints = _hints(ann, names)
    heads = [_head(h) for h in hints]
    if any(_is_dataclass(h, classes) for h in heads):
        return {"type": "json"}
    if "optional_bool_str" in rules and set(heads) == {"bool", "str", "None"}:
        return {"nargs": "?"}
    if "bool" in heads:
        return {"action": "BooleanOptionalAction"}
    lit = [h for h in hints if isinstance(h, ast.Subscript) and _head(h) == "Literal"]
    if lit:
        values = [v for h in lit for v in _literals(h, names)]
        if "literal_metavar" in rules and "str" in heads:
            return {}
        return {"choices": sorted({str(v) for v in values})}
    for coll in ("tuple", "list", "set"):
        found = [h for h in hints if _head(h) == coll]
        if found:
            h = found[0]
            if coll == "set" and "set_nargs" not in rules:
                continue
            inner = (
                (h.slice.elts if isinstance(h.slice, ast.Tuple) else [h.slice]) if isinstance(h, ast.Subscript) else []
            )
            ellipsis = any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in inner)
            nargs = "+" if coll != "tuple" or ellipsis else len(inner)
            out: dict = {"nargs": nargs}
            if inner and isinstance(inner[0], ast.Subscript) and _head(inner[0]) == "Literal":
                out["choices"] = sorted({str(v) for v in _literals(inner[0], names)})
            return out
    return {}


def _vllm_rules(arg_utils: str) -> set[str]:
    """Which of ``_compute_kwargs``'s rules this release has."""
    rules = set()
    if "type_hints == {bool, str, type(None)}" in arg_utils:
        rules.add("optional_bool_str")
    if '"metavar" if contains_type(type_hints, str)' in arg_utils:
        rules.add("literal_metavar")
    if "contains_type(type_hints, set)" in arg_utils:
        rules.add("set_nargs")
    return rules


def _kwargs_vars(fn_trees: list[ast.AST]) -> tuple[dict[str, str], dict[str, str]]:
    """``x_kwargs = get_kwargs(Class)`` → {var: Class}; ``x = get_kwargs(Class)["field"]`` → {var: Class.field}."""
    whole: dict[str, str] = {}
    one: dict[str, str] = {}
    for tree in fn_trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                v = node.value
                if isinstance(v, ast.Call) and ast.unparse(v.func).endswith("get_kwargs") and v.args:
                    whole[node.targets[0].id] = ast.unparse(v.args[0])
                elif (
                    isinstance(v, ast.Subscript)
                    and isinstance(v.value, ast.Call)
                    and ast.unparse(v.value.func).endswith("get_kwargs")
                ):
                    one[node.targets[0].id] = f"{ast.unparse(v.value.args[0])}.{_const(v.slice, {})}"
                elif isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id in whole:
                    one[node.targets[0].id] = f"{whole[v.value.id]}.{_const(v.slice, {})}"
    return whole, one


def _edits(tree: ast.AST, var: str) -> dict[str, dict[str, ast.AST | None]]:
    """``var["field"]["key"] = value`` and ``del var["field"]["key"]`` in a function: field → key → value (None:
    deleted)."""
    out: dict[str, dict[str, ast.AST | None]] = {}

    def target(t: ast.AST) -> tuple[str, str] | None:
        if (
            isinstance(t, ast.Subscript)
            and isinstance(t.value, ast.Subscript)
            and isinstance(t.value.value, ast.Name)
            and t.value.value.id == var
        ):
            try:
                return str(_const(t.value.slice, {})), str(_const(t.slice, {}))
            except Unreadable:
                return None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (ft := target(t)) is not None:
                    out.setdefault(ft[0], {})[ft[1]] = node.value
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                if (ft := target(t)) is not None:
                    out.setdefault(ft[0], {})[ft[1]] = None
    return out


def vllm_flags(src: dict[str, str]) -> tuple[dict[str, dict], dict]:
    trees = {n: ast.parse(t) for n, t in src.items()}
    all_trees = list(trees.values())
    names = _module_names(all_trees)
    classes = _classes(all_trees)
    rules = _vllm_rules(src["vllm/engine/arg_utils.py"])
    flags: dict[str, dict] = {}
    cls_loop: list[str] = []

    def field_of(cls_name: str, field: str) -> dict:
        cls = classes.get(cls_name)
        if cls is None:
            raise Unreadable(f"vllm: no class {cls_name}")
        for fname, ann, _ in _fields(cls, classes):
            if fname == field:
                return _field_kwargs(ann, names, classes, rules, f"{cls_name}.{field}")
        raise Unreadable(f"vllm: {cls_name} has no field {field}")

    def apply(base: dict, edit: dict[str, ast.AST | None]) -> dict:
        base = dict(base)
        for key, value in edit.items():
            if key not in ("nargs", "action", "choices", "type"):
                continue
            if value is None:
                base.pop(key, None)
            else:
                base[key] = value
        return base

    def add(opts: list[str], base: dict, explicit: dict[str, ast.AST], where: str) -> None:
        kw: dict[str, ast.AST] = {}
        for k, v in base.items():
            if k == "action":
                kw["action"] = ast.Name(v) if isinstance(v, str) else v
            elif k == "nargs":
                kw["nargs"] = ast.Constant(v) if not isinstance(v, ast.AST) else v
            elif k == "choices":
                kw["choices"] = ast.List([ast.Constant(c) for c in v]) if not isinstance(v, ast.AST) else v
        if "metavar" in explicit and "choices" in kw and "choices" not in explicit:
            pass
        for k, v in explicit.items():
            if k in ("action", "nargs", "choices"):
                kw[k] = v
        if "action" in explicit and "nargs" in kw and "nargs" not in explicit:
            act = ast.unparse(explicit["action"])
            if act in ("'store_true'", "'store_false'", "argparse.BooleanOptionalAction"):
                kw.pop("nargs")
        if "action" in kw and "choices" in kw and ast.unparse(kw["action"]).endswith("BooleanOptionalAction"):
            kw.pop("choices")
        entry = _shape(kw, names, where)
        if "deprecated" in explicit:
            entry["deprecated"] = True
        _put(flags, opts, entry)

    for fname, tree in trees.items():
        if fname not in (
            "vllm/engine/arg_utils.py",
            "vllm/entrypoints/openai/cli_args.py",
            "vllm/entrypoints/common/cli_args.py",
            "vllm/entrypoints/launchers/cli_args.py",
        ):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            whole, one = _kwargs_vars([fn])
            edits = {v: _edits(fn, v) for v in whole}
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.For)
                    and isinstance(node.iter, ast.Call)
                    and getattr(node.iter.func, "attr", None) == "items"
                    and isinstance(node.iter.func.value, ast.Name)
                ):
                    var = node.iter.func.value.id
                    calls = [
                        c
                        for c in ast.walk(node)
                        if isinstance(c, ast.Call) and getattr(c.func, "attr", None) == "add_argument"
                    ]
                    if not calls:
                        continue
                    cls = whole.get(var)
                    if cls is None:
                        raise Unreadable(f"vllm: loop over {var}")
                    if cls == "cls":  # BaseFrontendArgs.add_cli_args: each subclass's own fields (below)
                        cls_loop.append(fname)
                        continue
                    for fld, _, _ in _fields(classes[cls], classes):
                        add(
                            [f"--{fld.replace('_', '-')}"],
                            apply(field_of(cls, fld), edits[var].get(fld, {})),
                            {},
                            f"{cls}.{fld}",
                        )
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
                    continue
                if not all(isinstance(a, ast.Constant) for a in node.args):
                    continue  # the loops above
                opts = [a.value for a in node.args]
                explicit = {k.arg: k.value for k in node.keywords if k.arg}
                base: dict = {}
                for k in node.keywords:
                    if k.arg is not None:
                        continue
                    v = k.value
                    if isinstance(v, ast.Dict):  # **{**x_kwargs["f"], "key": value}
                        for dk, dv in zip(v.keys, v.values):
                            if dk is None:
                                v2 = dv
                                base = {**base, **_expand(v2, whole, one, edits, field_of, apply)}
                            else:
                                explicit[str(_const(dk, {}))] = dv
                    else:
                        base = {**base, **_expand(v, whole, one, edits, field_of, apply)}
                add(opts, base, explicit, opts[0])
    # the frontend classes' loop (0.3x): FrontendArgs.add_cli_args adds each field of the class it is called on
    for cls_name in ("FrontendArgs",):
        if cls_loop and cls_name in classes:
            cls = classes[cls_name]
            edits: dict[str, dict] = {}
            for c in (*[classes[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in classes], cls):
                custom = next(
                    (f for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "_customize_cli_kwargs"), None
                )
                for fld, e in (_edits(custom, "frontend_kwargs") if custom is not None else {}).items():
                    edits.setdefault(fld, {}).update(e)
            for fld, _, default in _fields(cls, classes):
                extra: list[str] = []
                if isinstance(default, ast.Call):
                    for k in default.keywords:
                        if k.arg == "metadata":
                            md = k.value
                            if isinstance(md, ast.Dict):
                                for dk, dv in zip(md.keys, md.values):
                                    if isinstance(dk, ast.Constant) and dk.value == "flags":
                                        extra = list(_const(dv, names))
                add(
                    [*extra, f"--{fld.replace('_', '-')}"],
                    apply(field_of(cls_name, fld), edits.get(fld, {})),
                    {},
                    f"{cls_name}.{fld}",
                )
    parser_src = src.get("vllm/utils/argparse_utils.py") or src["vllm/utils/__init__.py"]
    return flags, _vllm_parser(parser_src)


def _expand(v: ast.AST, whole, one, edits, field_of, apply) -> dict:
    """``x_kwargs["field"]`` (or a variable holding one field's kwargs) as the field's keywords."""
    if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id in whole:
        var, fld = v.value.id, str(_const(v.slice, {}))
        return apply(field_of(whole[var], fld), edits[var].get(fld, {}))
    if isinstance(v, ast.Name) and v.id in one:
        cls, _, fld = one[v.id].partition(".")
        return field_of(cls, fld)
    raise Unreadable(f"vllm: **{ast.unparse(v)}")


def _vllm_parser(text: str) -> dict:
    """What FlexibleArgumentParser.parse_args does to a line before argparse reads it."""
    m = re.search(r"class FlexibleArgumentParser.*?def parse_args\(.*?(?=\n    def |\nclass |\Z)", text, re.S)
    if m is None:
        raise Unreadable("vllm: no FlexibleArgumentParser.parse_args")
    body = m.group(0)
    o_lines = [
        ln.strip()
        for ln in body.splitlines()
        if ("-O" in ln or "optimization_level" in ln or "level" in ln and "processed_args" in ln)
        and not ln.strip().startswith("#")
    ]
    attached = re.search(
        r"processed_args(?:\.append\(|\s*\+=\s*\[)f?['\"]([^'\"{]*)",
        "\n".join(ln for ln in o_lines if "arg[3:]" in ln or "processed_args" in ln),
    )
    return {
        "allow_abbrev": "allow_abbrev=False" not in text,
        "underscores": 'replace("_", "-")' in body or "replace('_', '-')" in body,
        "dotted_json": 'split(".")' in body,
        "model_option": (
            "refused"
            if re.search(
                r"raise ValueError\(\s*\"With `vllm serve`, you should provide the "
                r"model as a",
                body,
            )
            else "moved"
        ),
        "o_rewrite": [ln for ln in o_lines if "processed_args" in ln or "in {" in ln],
        "o_target": attached.group(1) if attached else None,
    }


# --- the table ------------------------------------------------------------------------------------------------


def extract(engine: str, wheel: Path) -> tuple[dict[str, dict], dict]:
    src = sources(engine, wheel)
    return sglang_flags(src) if engine == "sglang" else vllm_flags(src)


def table(engine: str, versions: tuple[str, ...], wheels: Path, download: bool) -> dict:
    per: dict[str, dict[str, dict]] = {}
    header: dict[str, dict] = {}
    parsers: dict[str, dict] = {}
    for v in versions:
        wheel = wheel_path(engine, v, wheels, download)
        flags, parser = extract(engine, wheel)
        per[v] = flags
        parsers[v] = parser
        header[v] = {"wheel": wheel.name, "sha256": sha256(wheel), "flags": len(flags)}
        print(f"{engine} {v}: {len(flags)} flags", file=sys.stderr)
    return {
        "engine": engine,
        "generated_by": "validation/engine_flags.py",
        "sources": (
            "vllm/engine/arg_utils.py, vllm/config*.py, vllm/entrypoints/{openai,common}/cli_args.py, "
            "FlexibleArgumentParser"
            if engine == "vllm"
            else "sglang/srt/server_args.py"
        ),
        "releases": header,
        "parser": _runs(parsers, versions),
        "flags": _flag_runs(per, versions),
    }


def _runs(values: dict[str, dict], versions: tuple[str, ...]) -> list[dict]:
    """Consecutive releases with the same value as one row: {"from", "to", **value}."""
    out: list[dict] = []
    for v in versions:
        if v not in values:
            continue
        if out and out[-1]["value"] == values[v] and out[-1]["next"] == v:
            out[-1]["to"] = v
        else:
            out.append({"from": v, "to": v, "value": values[v]})
        i = versions.index(v)
        out[-1]["next"] = versions[i + 1] if i + 1 < len(versions) else None
    return [{"from": r["from"], "to": r["to"], **r["value"]} for r in out]


def _flag_runs(per: dict[str, dict[str, dict]], versions: tuple[str, ...]) -> dict[str, list[dict]]:
    names = sorted({f for flags in per.values() for f in flags})
    return {f: _runs({v: per[v][f] for v in versions if v in per and f in per[v]}, versions) for f in names}


def _restrict(data: dict, versions: tuple[str, ...], every: tuple[str, ...]) -> dict:
    """A committed table cut to some releases (rows re-joined over those alone)."""

    def expand(rows: list[dict]) -> dict[str, dict]:
        out = {}
        for r in rows:
            lo, hi = every.index(r["from"]), every.index(r["to"])
            value = {k: x for k, x in r.items() if k not in ("from", "to")}
            for v in every[lo : hi + 1]:
                if v in versions:
                    out[v] = value
        return out

    flags = {}
    for f, rows in data["flags"].items():
        kept = _runs(expand(rows), versions)
        if kept:
            flags[f] = kept
    return {
        **data,
        "releases": {v: h for v, h in data["releases"].items() if v in versions},
        "parser": _runs(expand(data["parser"]), versions),
        "flags": flags,
    }


def dump(data: dict) -> str:
    """One flag a line, so a change reads as a diff of the flags it touches."""
    lines = ["{"]
    keys = list(data)
    for i, k in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        v = data[k]
        if k in ("flags", "releases"):
            lines.append(f"  {json.dumps(k)}: {{")
            items = list(v.items())
            for j, (name, rows) in enumerate(items):
                c = "," if j < len(items) - 1 else ""
                lines.append(f"    {json.dumps(name)}: {json.dumps(rows, separators=(',', ':'))}{c}")
            lines.append("  }" + comma)
        else:
            lines.append(f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("vllm", "sglang", "both"), default="both")
    p.add_argument("--check", action="store_true", help="compare with the committed tables instead of writing")
    p.add_argument("--download", action="store_true", help="pip download missing wheels")
    p.add_argument("--wheels", type=Path, default=Path("/tmp/wheels"))
    p.add_argument("--releases", help="comma-separated releases (default: every modelled release)")
    args = p.parse_args(argv)
    bad = 0
    for engine in ("vllm", "sglang") if args.engine == "both" else (args.engine,):
        every = releases(engine)
        versions = every
        if args.releases:
            versions = tuple(v for v in every if v in args.releases.split(","))
            if not versions:
                continue
        data = table(engine, versions, args.wheels, args.download)
        if args.check:
            committed = json.loads(OUT[engine].read_text())
            if versions != every:
                committed = _restrict(committed, versions, every)
                print(f"{engine}: comparing releases {', '.join(versions)} only", file=sys.stderr)
            if committed != json.loads(dump(data)):
                diff = [
                    f
                    for f in sorted(set(committed["flags"]) | set(data["flags"]))
                    if committed["flags"].get(f) != data["flags"].get(f)
                ]
                other = [k for k in ("releases", "parser") if committed[k] != data[k]]
                print(
                    f"{engine}: the committed table differs from the wheels: {', '.join(other + diff[:20])}"
                    f"{' …' if len(diff) > 20 else ''}",
                    file=sys.stderr,
                )
                bad = 1
            else:
                print(f"{engine}: the committed table equals the wheels' ({len(versions)} releases)", file=sys.stderr)
        else:
            if versions != every:
                print(f"{engine}: writing only releases {', '.join(versions)}", file=sys.stderr)
            OUT[engine].write_text(dump(data))
    return bad


if __name__ == "__main__":
    raise SystemExit(main())
