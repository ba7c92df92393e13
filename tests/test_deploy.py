"""`fit --emit`: the engines' --config files and the Kubernetes manifests (hybridplan/deploy.py).

The config files are held to the command `fit` prints, flattened by the rule each engine documents for its
--config file (vllm/utils/argparse_utils.py ``load_config_file``, 0.33.0: ``true`` → the bare switch, anything
else → ``--key value``, ``model`` → the positional model; SGLang python/sglang/srt/utils/server_args_config_parser.py
``ConfigArgumentMerger``, 0.5.23: the same, keys as flags). validation/emit.py has the engines' own parsers read
both and compares what they make. The manifests are held to Kubernetes' own schemas (kubernetes-validate,
strict)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from hybridplan import __version__

pytestmark = pytest.mark.cli

K8S = kubernetes_validate.utils.latest_version()

CASES = [
    ["nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB"],
    ["qwen3-next", "--tp", "4", "--ctx", "32k", "--gpu-type", "h100", "--kv-dtype", "fp8", "--max-num-seqs", "64"],
    [
        "qwen3.5-4b",
        "--ctx",
        "16384",
        "--kv-budget",
        "30GiB",
        "--enforce-eager",
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":2}',
    ],
]


def _flatten(items: dict, positional: str | None) -> list[str]:
    """A config file's keys as the engine turns them into arguments (the rule in the module docstring)."""
    out: list[str] = []
    for key, value in items.items():
        if key == positional:
            out.insert(0, str(value))
        elif value is True:
            out.append(f"--{key}")
        else:
            out += [f"--{key}", str(value)]
    return out


def _commands(run_cli, args) -> dict:
    code, out, _ = run_cli("fit", *args, "--json")
    assert code == 0
    return json.loads(out)["commands"]


@pytest.mark.parametrize("args", CASES, ids=["nemotron-h", "qwen3-next-tp4", "qwen3.5-mtp"])
def test_each_config_file_is_the_printed_command(run_cli, args):
    commands = _commands(run_cli, args)
    for engine, program, positional in (("vllm", 2, "model"), ("sglang", 3, None)):
        code, out, err = run_cli("fit", *args, "--emit", f"{engine}-config")
        assert code == 0 and err == ""
        assert out.startswith(f"# {engine} --config file") and f"hybridplan {__version__}" in out.splitlines()[0]
        items = yaml.safe_load(out)
        argv = commands[engine]["argv"][program:]
        assert _flatten(items, positional) == argv


def test_the_header_names_the_figures_it_came_from(run_cli):
    """The lines fit predicts the engine prints (vLLM's block, padding and KV cache size) head the file."""
    code, out, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--json")
    logs = json.loads(out)["vllm"]["modes"]["align"]["logs"]
    code, text, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--emit", "vllm-config")
    header = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    assert [f"predicted: {line}" for line in logs] == [h for h in header if h.startswith("predicted: ")]
    assert any(h.startswith("from: vllm serve nvidia/Nemotron-H-8B-Base-8K") for h in header)


def test_sglang_before_its_config_file_is_refused(run_cli):
    """--config came in 0.5.3rc2 (server_args_config_parser.py is absent from the 0.5.2 and 0.5.3rc0 wheels)."""
    code, out, err = run_cli(
        "fit",
        "qwen3-next",
        "--tp",
        "4",
        "--ctx",
        "8192",
        "--kv-budget",
        "40GiB",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.2",
        "--emit",
        "sglang-config",
    )
    assert code == 2 and out == ""
    assert err.strip() == "hybridplan: error: sglang 0.5.2 reads no --config file (from 0.5.3rc2)"


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize(
    "args,gpus,replicas",
    [
        (["nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--tp", "2"], 2, 1),
        # a dense model's data-parallel ranks run as replicas of one engine (vllm/engines/vllm/deploy.py)
        (["nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--dp", "2", "--engine", "vllm"], 1, 2),
        (["qwen3-next", "--ctx", "32k", "--gpu-type", "h100", "--tp", "4"], 4, 1),
    ],
)
def test_the_manifests_pass_kubernetes_own_schemas(run_cli, args, gpus, replicas):
    code, out, err = run_cli("fit", *args, "--emit", "k8s")
    assert code == 0 and err == ""
    for stream in out.split("\n---\n# Kubernetes manifests"):
        docs = _docs(stream if stream.startswith("#") else "# " + stream)
        assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service"]
        for d in docs:
            kubernetes_validate.validate(d, K8S, strict=True)
        dep = docs[1]
        limits = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == gpus
        engine = dep["spec"]["template"]["spec"]["containers"][0]["name"]
        assert dep["spec"]["replicas"] == (replicas if engine == "vllm" else 1)
        config = yaml.safe_load(next(iter(docs[0]["data"].values())))
        assert "data-parallel-size" not in config or engine == "sglang"


def test_past_one_node_a_replica_is_a_leader_worker_set(run_cli):
    """TP 8 × PP 2 = 16 GPUs: two nodes of 8. The pod templates are held to Kubernetes' PodTemplate schema; the
    leader serves and has the probes, the worker joins it."""
    code, out, _ = run_cli(
        "fit",
        "qwen3.5-397b-a17b",
        "--ctx",
        "32768",
        "--gpu-type",
        "h100",
        "--tp",
        "8",
        "--pp",
        "2",
        "--engine",
        "vllm",
        "--emit",
        "k8s",
    )
    assert code == 0
    docs = _docs(out)
    lws = docs[1]
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][role]
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
            K8S,
            strict=True,
        )
        (container,) = template["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert ("readinessProbe" in container) == (role == "leaderTemplate")
    kubernetes_validate.validate(docs[2], K8S, strict=True)


def test_a_replica_that_does_not_fill_whole_nodes_is_dealt_evenly(run_cli):
    """TP 2 × PP 6 = 12 GPUs a replica on nodes of 8: not whole nodes, so the largest pod that divides 12 and
    keeps each TP pair whole, 6 GPUs, twice. TP 8 on nodes of 6 cannot keep a TP group on one node."""
    # plan's second pick for 128 requests of 32k (`plan qwen3.5-397b-a17b --ctx 32k --concurrency 128`)
    base = [
        "fit",
        "qwen3.5-397b-a17b",
        "--ctx",
        "32k",
        "--gpu-type",
        "h100",
        "--kv-cache-dtype",
        "fp8",
        "--mamba-ssm-cache-dtype",
        "bfloat16",
        "--max-num-seqs",
        "128",
        "--engine",
        "vllm",
        "--emit",
        "k8s",
    ]
    code, out, err = run_cli(*base, "--tp", "2", "--pp", "6")
    assert code == 0, err
    lws = _docs(out)[1]
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    (container,) = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 6
    code, _, err = run_cli(*base, "--tp", "8", "--pp", "2", "--gpus-per-node", "6")
    assert code == 2 and "cannot be dealt evenly over nodes of 6 GPUs" in err


def test_out_writes_the_files_and_the_report_follows(run_cli, tmp_path):
    code, out, err = run_cli(
        "fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--emit", "k8s", "--out", str(tmp_path / "deploy")
    )
    assert code == 0 and "verdict: starts" in out
    names = sorted(p.name for p in (tmp_path / "deploy").iterdir())
    assert names == ["nemotron-h-8b-sglang.k8s.yaml", "nemotron-h-8b-vllm.k8s.yaml"]
    assert err.count("hybridplan: wrote ") == 2


@pytest.mark.parametrize(
    "args,message",
    [
        (["--emit", "helm"], "unknown --emit format 'helm' (known: vllm-config, sglang-config, k8s, kserve)"),
        (
            ["--engine", "vllm", "--emit", "sglang-config"],
            "--emit sglang-config: no sglang start was planned (--engine sglang or both)",
        ),
        (
            ["--kv-budget", "1GiB", "--emit", "k8s", "--engine", "vllm", "--max-num-seqs", "4096"],
            "--emit k8s: no engine starts with these settings, so there is nothing to deploy",
        ),
        (
            ["--emit", "k8s", "--json"],
            "--emit k8s without --out prints the files: give --out DIR to print the report too",
        ),
        (["--out", "deploy"], "--out names the folder --emit writes into: give --emit FORMAT as well"),
    ],
)
def test_what_cannot_be_emitted_is_one_line(run_cli, args, message):
    base = ["fit", "nemotron-h", "--ctx", "8192"] + ([] if "--kv-budget" in args else ["--kv-budget", "40GiB"])
    code, out, err = run_cli(*base, *args)
    assert code == 2 and out == ""
    assert err.strip() == f"hybridplan: error: {message}"


# --- KServe -------------------------------------------------------------------------------------------------------

#: the LLMInferenceService CRD's openAPIV3Schema, v1alpha2 (kserve/kserve v0.20.0; tests/data/SOURCES.md)
KSERVE_SCHEMA = Path(__file__).parent / "data" / "kserve" / "llminferenceservice-v1alpha2.schema.json"


def _strict(schema):
    """The CRD's schema as the API server applies it with strict field validation (kubectl's default): an object
    that lists its properties takes no other key, unless it keeps unknown fields
    (``x-kubernetes-preserve-unknown-fields``) or says what its other keys hold (``additionalProperties``)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "properties":  # field name → schema
            out[key] = {name: _strict(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"):
            out[key] = _strict(value)
        else:
            out[key] = value
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def kserve_validator():
    import jsonschema

    return jsonschema.Draft4Validator(_strict(json.loads(KSERVE_SCHEMA.read_text())))


def _kserve(run_cli, args) -> tuple[dict, dict]:
    code, out, err = run_cli("fit", *args, "--engine", "vllm", "--emit", "kserve")
    assert code == 0 and err == ""
    (doc,) = _docs(out)
    return doc, _commands(run_cli, [*args, "--engine", "vllm"])["vllm"]


def _pairs(argv: list[str], drop: tuple[str, ...]) -> tuple[list[str], dict]:
    """The flags of ``argv`` without those in ``drop`` (each with its value), and the dropped ones' values."""
    kept, dropped, i = [], {}, 0
    while i < len(argv):
        if argv[i] in drop:
            dropped[argv[i]] = argv[i + 1]
            i += 2
        else:
            kept.append(argv[i])
            i += 1
    return kept, dropped


@pytest.mark.parametrize(
    "args,replicas,gpus",
    [
        (["nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB"], 1, 1),
        # a JSON-valued flag and a switch; TP 2
        (
            [
                "qwen3.5-4b",
                "--ctx",
                "16384",
                "--kv-budget",
                "30GiB",
                "--enforce-eager",
                "--tp",
                "2",
                "--speculative-config",
                '{"method":"mtp","num_speculative_tokens":2}',
            ],
            1,
            2,
        ),
        # a dense model's data-parallel ranks: replicas of one engine (hybridplan/engines/vllm/deploy.py dp_replicas)
        (["nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--dp", "2"], 2, 1),
        (["qwen3-next", "--ctx", "32k", "--gpu-type", "h100", "--tp", "2", "--pp", "2", "--kv-dtype", "fp8"], 1, 4),
    ],
    ids=["nemotron-h", "qwen3.5-mtp-tp2", "nemotron-h-dp2", "qwen3-next-tp2-pp2"],
)
def test_kserve_passes_its_published_schema_and_runs_the_printed_command(
    run_cli, kserve_validator, args, replicas, gpus
):
    doc, command = _kserve(run_cli, args)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in kserve_validator.iter_errors(doc)]
    assert errors == []
    spec = doc["spec"]
    # the CRD's one rule on spec (x-kubernetes-validations): replicas and scaling are not both given
    assert "scaling" not in spec and spec["replicas"] == replicas
    (container,) = spec["template"]["containers"]
    assert container["name"] == "main" and container["image"] == "vllm/vllm-openai:v0.33.0"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    # the template runs eval "exec vllm serve /mnt/models --served-model-name … --port 8000
    # --tensor-parallel-size {spec.parallelism.tensor} … $@": the args, as eval reads them, are the printed
    # command's flags but the one the template writes; the model is spec.model's
    argv = command["argv"]
    assert spec["model"] == {"uri": f"hf://{argv[2]}", "name": argv[2]}
    kept, dropped = _pairs(argv[3:], ("--tensor-parallel-size", "--data-parallel-size"))
    assert shlex.split(" ".join(container.get("args", []))) == kept
    assert spec["parallelism"]["tensor"] == int(dropped.get("--tensor-parallel-size", 1))
    assert replicas == int(dropped.get("--data-parallel-size", 1))
    assert spec["parallelism"].get("pipeline", 1) * spec["parallelism"]["tensor"] == gpus


def test_the_kserve_schema_holds_unknown_fields_out(kserve_validator, run_cli):
    """The strict schema refuses a key the CRD does not list (so the test above can fail), and the CRD's own
    ``minimum: 1`` on the tensor size."""
    doc, _ = _kserve(run_cli, ["nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB"])
    doc["spec"]["template"]["containers"][0]["gpus"] = 1
    doc["spec"]["parallelism"]["tensor"] = 0
    messages = sorted(e.message for e in kserve_validator.iter_errors(doc))
    assert len(messages) == 2
    assert any("'gpus' was unexpected" in m for m in messages) and any("less than the minimum" in m for m in messages)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--engine", "sglang"],
            "--emit kserve: KServe's LLMInferenceService template runs vllm serve, and no vllm start was planned "
            "(--engine vllm or both)",
        ),
        (
            ["qwen3.5-397b-a17b", "--ctx", "32768", "--gpu-type", "h100", "--tp", "8", "--pp", "2", "--engine", "vllm"],
            "--emit kserve: a replica of 16 GPUs spans 2 nodes of 8, which --emit kserve does not write (--emit k8s "
            "writes a LeaderWorkerSet)",
        ),
    ],
)
def test_what_kserve_cannot_run_is_one_line(run_cli, args, message):
    code, out, err = run_cli("fit", *args, "--emit", "kserve")
    assert code == 2 and out == ""
    assert err.strip() == f"hybridplan: error: {message}"
