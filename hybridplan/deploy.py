"""What `fit` and `plan` decided, as files a deployment reads: each engine's ``--config`` YAML, Kubernetes
manifests that run the engine's own image with it, and a KServe ``LLMInferenceService``
(``--emit vllm-config | sglang-config | k8s | kserve``).

Pure: a ``Target`` (the engine command hybridplan prints, the release, the layout) in, ``Emitted`` files out.
The engines' own rules for their files, images, ports and health endpoints are in
hybridplan/engines/vllm/deploy.py and hybridplan/engines/sglang/deploy.py; this module only writes them down.
"""

from __future__ import annotations

import shlex

import yaml
from msgspec import Struct

from hybridplan import __version__
from hybridplan.cmdline import Command
from hybridplan.errors import PlanError

FORMATS = ("vllm-config", "sglang-config", "k8s", "kserve")
#: GPUs a node offers where the user does not say (an HGX / DGX board)
GPUS_PER_NODE = 8


class Target(Struct, frozen=True):
    """One engine's start, as `fit` or `plan` chose it."""

    engine: str
    #: the engine's release (hybridplan.engines.*.releases.Release)
    release: object
    command: Command
    #: the model's name, for the manifests' names
    name: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    #: the data-parallel ranks are one engine (experts or attention split over them), not independent replicas
    dp_coupled: bool = False
    #: the figures the files came from, one line each, for the files' header comments
    figures: tuple[str, ...] = ()
    gpus_per_node: int = GPUS_PER_NODE


class Emitted(Struct, frozen=True):
    """One file: its name and its text."""

    name: str
    text: str


def _version(target: Target) -> str:
    return target.release.version  # type: ignore[attr-defined]


class _Dumper(yaml.SafeDumper):
    """YAML as a person writes it: no anchors for repeated values, a multi-line string as a literal block."""

    def ignore_aliases(self, data) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, value: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _string)


def _dump(docs: list) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 16)


def _engine(name: str):
    from hybridplan.engines.sglang import deploy as sglang_deploy
    from hybridplan.engines.vllm import deploy as vllm_deploy

    return vllm_deploy if name == "vllm" else sglang_deploy


def _value(text: str):
    """A flag's value as YAML should hold it: an int or a float where it reads as one, else the string
    (a JSON config stays a JSON string: every release reads that form)."""
    for kind in (int, float):
        try:
            v = kind(text)
        except ValueError:
            continue
        if str(v) == text or kind is float and repr(v) == text:
            return v
    return text


def config_items(target: Target) -> dict:
    """The engine command's flags as the keys of the engine's ``--config`` file, in order."""
    eng = _engine(target.engine)
    argv = target.command.argv
    rest = list(argv[eng.program_length(argv) :])
    items: dict = {}
    if eng.POSITIONAL_MODEL and rest and not rest[0].startswith("-"):
        items[eng.POSITIONAL_MODEL] = rest.pop(0)
    if target.dp > 1 and not target.dp_coupled:  # the ranks become replicas (``layout``), each without the flag
        rest = _without(rest, "--data-parallel-size")
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("--"):
            raise PlanError(f"cannot write {tok!r} of the {target.engine} command into a config file")
        key, eq, val = tok[2:].partition("=")
        if eq:
            items[key] = _value(val)
            i += 1
        elif i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            items[key] = _value(rest[i + 1])
            i += 2
        else:
            items[key] = True
            i += 1
    return items


def _without(argv: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for tok in argv:
        if skip:
            skip = False
        elif tok == flag:
            skip = True
        elif not tok.startswith(flag + "="):
            out.append(tok)
    return out


def _header(target: Target, what: str) -> str:
    lines = [
        f"{what}, written by hybridplan {__version__} for {target.engine} {_version(target)}",
        f"from: {target.command}",
        *target.figures,
    ]
    if target.command.env:
        lines.append("environment the engine needs: " + " ".join(target.command.env))
    lines += list(target.command.notes)
    return "".join(f"# {line}\n" for line in lines)


def engine_config(target: Target) -> Emitted:
    """``--emit vllm-config`` / ``--emit sglang-config``: the YAML ``--config FILE`` reads."""
    eng = _engine(target.engine)
    if not target.release.at_least(eng.CONFIG_FROM):  # type: ignore[attr-defined]
        raise PlanError(f"{target.engine} {_version(target)} reads no --config file (from {eng.CONFIG_FROM})")
    body = _dump([config_items(target)])
    text = _header(target, f"{target.engine} --config file (run: {eng.RUN} {target.engine}.yaml)") + body
    return Emitted(f"{target.engine}.yaml", text)


def _dns(text: str) -> str:
    """A Kubernetes name (RFC 1123 label): lower case, digits and dashes, at most 63."""
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out[:63].strip("-") or "model"


def _container(target: Target, config_path: str, gpus: int, role: str = "server", nodes: int = 1) -> dict:
    """The engine's container: one server, or (``role`` leader / worker) one node of a replica over ``nodes``."""
    eng = _engine(target.engine)
    env = [{"name": k, "value": v} for k, _, v in (e.partition("=") for e in target.command.env)]
    if role != "server":
        leader, worker = eng.node_commands(config_path, nodes)
        command, args = (leader if role == "leader" else worker), []
    else:
        command, args = eng.server_command(config_path)
    c: dict = {"name": target.engine, "image": eng.image(_version(target)), "command": command}
    if args:
        c["args"] = args
    if env:
        c["env"] = env
    c["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    c["volumeMounts"] = [
        {"name": "config", "mountPath": "/etc/hybridplan", "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    if role != "worker":  # the pod that serves: its port and the engine's health endpoint
        probe = {"httpGet": {"path": eng.HEALTH, "port": eng.PORT}}
        c["ports"] = [{"name": "http", "containerPort": eng.PORT}]
        # loading the weights takes minutes: the startup probe allows an hour, then liveness takes over
        c["startupProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": 360}
        c["readinessProbe"] = {**probe, "periodSeconds": 5, "failureThreshold": 3}
        c["livenessProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": 6}
    return c


def _pod_spec(target: Target, config_map: str, gpus: int, role: str = "server", nodes: int = 1) -> dict:
    path = f"/etc/hybridplan/{target.engine}.yaml"
    return {
        "containers": [_container(target, path, gpus, role, nodes)],
        "volumes": [
            {"name": "config", "configMap": {"name": config_map}},
            # the engines' workers share tensors through /dev/shm, which a container has little of
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        ],
    }


def layout(target: Target) -> tuple[int, int, int]:
    """(replicas, GPUs per pod, pods per replica): data-parallel ranks become replicas where they are
    independent engines; a replica past one node's GPUs is a group of pods (a LeaderWorkerSet), as many GPUs
    each as divide it evenly with its TP groups whole."""
    per_replica = target.tp * target.pp * (target.dp if target.dp_coupled else 1)
    replicas = 1 if target.dp_coupled else target.dp
    node = target.gpus_per_node
    if per_replica <= node:
        return replicas, per_replica, 1
    # past one node: the fullest pod that divides the replica evenly and keeps each TP group whole, one a node
    # (vLLM's and SGLang's multi-node starts take the same GPUs from every node)
    fits = [g for g in range(node, 0, -1) if per_replica % g == 0 and g % target.tp == 0]
    if not fits:
        raise PlanError(
            f"{per_replica} GPUs a replica at TP {target.tp} cannot be dealt evenly over nodes of {node} "
            "GPUs with each TP group on one node (--gpus-per-node)"
        )
    return replicas, fits[0], per_replica // fits[0]


def k8s(target: Target) -> Emitted:
    """``--emit k8s``: a ConfigMap with the engine's config file, the engine's Deployment (or, past one node, a
    LeaderWorkerSet) and a Service in front of it."""
    name = _dns(f"{target.name}-{target.engine}")
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "hybridplan"}
    config = engine_config(target)
    replicas, gpus, pods = layout(target)
    docs: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": {config.name: config.text},
        }
    ]
    if pods == 1:
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": _pod_spec(target, name, gpus)},
                },
            }
        )
    else:

        def template(role: str) -> dict:
            return {"metadata": {"labels": labels}, "spec": _pod_spec(target, name, gpus, role, pods)}

        docs.append(
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": replicas,
                    "leaderWorkerTemplate": {
                        "size": pods,
                        "leaderTemplate": template("leader"),
                        "workerTemplate": template("worker"),
                    },
                },
            }
        )
    eng = _engine(target.engine)
    # the Service reaches the pods that serve (a LeaderWorkerSet's leaders carry its role label)
    selector = labels if pods == 1 else {**labels, "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": selector, "ports": [{"name": "http", "port": eng.PORT, "targetPort": "http"}]},
        }
    )
    head = _header(target, f"Kubernetes manifests ({replicas} replica(s) of {gpus * pods} GPU(s), {pods} pod(s) each)")
    text = head + _dump(docs)
    return Emitted(f"{name}.k8s.yaml", text)


# --- KServe (kserve/kserve v0.20.0) ------------------------------------------------------------------------------
#: the KServe release whose CRD and default template the resource is written for
KSERVE_RELEASE = "v0.20.0"
#: the resource written, as the CRD serves and stores it (config/crd/full/llmisvc/
#: serving.kserve.io_llminferenceservices.yaml: v1alpha2 ``storage: true``)
KSERVE_API = "serving.kserve.io/v1alpha2"
#: the flags KServe's default template (config/llmisvcconfig/config-llm-template.yaml, kserve-config-llm-template)
#: already gives ``vllm serve /mnt/models``: the model is the folder its storage initializer fills from
#: ``spec.model.uri``, ``--served-model-name`` is ``spec.model.name``, ``--port 8000``, and
#: ``--tensor-parallel-size`` is ``spec.parallelism.tensor``
KSERVE_SETS = ("--tensor-parallel-size", "--port", "--served-model-name")
#: the template's container, merged with the one written here by name (pkg/controller/v1alpha2/llmisvc/
#: config_merge.go, a strategic merge)
KSERVE_CONTAINER = "main"


def _model_uri(model: str) -> str:
    """``spec.model.uri``: a Hugging Face id as ``hf://ORG/NAME``; a URI KServe reads (``hf://``, ``pvc://``,
    ``s3://``, ``gs://``, ``oci://``) as it is."""
    if "://" in model:
        return model
    org, _, name = model.partition("/")
    if not org or not name or "/" in name or model.startswith((".", "~")):
        raise PlanError(
            f"--emit kserve: the model {model!r} is neither a Hugging Face id nor a URI KServe "
            "downloads from (hf://, pvc://, s3://, gs://, oci://)"
        )
    return f"hf://{model}"


def kserve(target: Target) -> Emitted:
    """``--emit kserve``: an ``LLMInferenceService`` that runs vLLM's image at the release sized, on KServe's
    default template (its router, scheduler and gateway left to KServe's defaults).

    The template starts ``eval "exec vllm serve /mnt/models … $@"`` with the container's ``args`` as ``$@``: each
    flag the figures depend on is an argument there, quoted for that ``eval`` (a JSON config keeps its quotes).
    ``spec.parallelism`` holds TP (and PP); data-parallel ranks that are independent engines are
    ``spec.replicas``, coupled ones (a MoE's) stay ``--data-parallel-size`` in one pod with all their GPUs."""
    if target.engine != "vllm":
        raise PlanError(
            "--emit kserve: KServe's LLMInferenceService template runs vllm serve; "
            f"{target.engine} is written by --emit k8s"
        )
    replicas, gpus, pods = layout(target)
    if pods > 1:
        raise PlanError(
            f"--emit kserve: a replica of {gpus * pods} GPUs spans {pods} nodes of "
            f"{target.gpus_per_node}, which --emit kserve does not write (--emit k8s writes a "
            "LeaderWorkerSet)"
        )
    eng = _engine(target.engine)
    argv = target.command.argv
    rest = list(argv[eng.program_length(argv) :])
    model = rest.pop(0)
    for flag in KSERVE_SETS:
        rest = _without(rest, flag)
    if not target.dp_coupled:
        rest = _without(rest, "--data-parallel-size")
    parallelism: dict = {"tensor": target.tp}
    if target.pp > 1:
        parallelism["pipeline"] = target.pp
    container: dict = {"name": KSERVE_CONTAINER, "image": eng.image(_version(target))}
    if rest:
        container["args"] = [shlex.quote(tok) for tok in rest]
    env = [{"name": k, "value": v} for k, _, v in (e.partition("=") for e in target.command.env)]
    if env:
        container["env"] = env
    container["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    # the template asks runAsNonRoot; vLLM's image names no user of its own (it would run as root)
    container["securityContext"] = {"runAsUser": 1000, "runAsGroup": 1000}
    name = _dns(f"{target.name}-{target.engine}")
    doc = {
        "apiVersion": KSERVE_API,
        "kind": "LLMInferenceService",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "hybridplan"},
        },
        "spec": {
            "model": {"uri": _model_uri(model), "name": model},
            "replicas": replicas,
            "parallelism": parallelism,
            "template": {"containers": [container]},
            "router": {"scheduler": {}, "route": {}, "gateway": {}},
        },
    }
    head = _header(
        target,
        f"KServe LLMInferenceService ({KSERVE_API}, KServe {KSERVE_RELEASE}'s default "
        f"template; {replicas} replica(s) of {gpus} GPU(s))",
    )
    head += "# the args are quoted for the template's eval (exec vllm serve /mnt/models ... $@)\n"
    return Emitted(f"{name}.kserve.yaml", head + _dump([doc]))


def emit(fmt: str, targets: dict[str, Target]) -> list[Emitted]:
    """The files of one ``--emit`` format for the engines planned (``targets`` by engine name)."""
    if fmt not in FORMATS:
        raise PlanError(f"unknown --emit format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "k8s":
        return [k8s(t) for t in targets.values()]
    if fmt == "kserve":
        if "vllm" not in targets:
            raise PlanError(
                "--emit kserve: KServe's LLMInferenceService template runs vllm serve, and no vllm "
                "start was planned (--engine vllm or both)"
            )
        return [kserve(targets["vllm"])]
    engine = fmt.split("-")[0]
    if engine not in targets:
        raise PlanError(f"--emit {fmt}: no {engine} start was planned (--engine {engine} or both)")
    return [engine_config(targets[engine])]
