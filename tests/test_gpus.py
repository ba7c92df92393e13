"""GPU names as people type them and as nvidia-smi and PyTorch print them (issue 28, item 10).

Each spelling below names where it was seen: the ``# GPU:`` lines and fused-MoE config paths of the logs under
tests/data/memlogs and tests/data/logs (``device_name=`` is ``torch.cuda.get_device_name()`` with spaces made
``_``), or nvidia-smi's ``name`` column as posted with the GPU's figure in hybridplan/gpus.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridplan.errors import PlanError
from hybridplan.gpus import GPUS, gpu, resolve
from tests.helpers import one_line_error

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name,key",
    [
        # tests/data/memlogs/vllm-0.10.0-Qwen3-32B-H100-1.log: "the run's file name says h100-80gb, the report
        # committed with it says Hardware: H100-80GB"
        ("h100-80gb", "h100"),
        ("H100-80GB", "h100"),
        # issue 28 item 10, as a user typed them
        ("a100-80gb", "a100-80g"),
        ("H100 SXM5 80GB", "h100"),
        # torch.cuda.get_device_name() in fused-MoE config paths: device_name=NVIDIA_H100_80GB_HBM3
        # (tests/data/memlogs/vllm-0.10.0-Qwen3-32B-H100-1.log), NVIDIA_A100-SXM4-80GB
        # (vllm-0.26.1rc1-Qwen3-Coder-30B-A3B-Instruct-A100-80GB-1.log), NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition
        # (vllm-0.12.0-Qwen3-30B-A3B-Instruct-2507-RTXPRO6000-1.log), NVIDIA_H200
        ("NVIDIA_H100_80GB_HBM3", "h100"),
        ("NVIDIA_A100-SXM4-80GB", "a100-80g"),
        ("NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition", "rtx-pro-6000"),
        ("NVIDIA_H200", "h200"),
        # form factors and sizes spelled every way: SXM, SXM4, PCIe, 80G / 80gb / 80GiB / "80 GB"
        ("A100 SXM4 40GB", "a100-40g"),
        ("a100-40gb-pcie", "a100-40g-pcie"),
        ("A100 PCIe 80G", "a100-80g-pcie"),
        ("h100 pcie 80gb", "h100-pcie"),
        ("H100 80 GB PCIe", "h100-pcie"),
        ("h200 141GiB", "h200"),
        # H100 NVL: 94 GB on the datasheet, 93.0 GiB in vLLM's log (the entry's source)
        ("H100 NVL 94GB", "h100-nvl"),
        ("rtx 5070 ti 16gb", "rtx-5070-ti"),
        ("L40S 48GB", "l40s"),
    ],
)
def test_the_spellings_people_type_and_tools_print(name, key):
    assert gpu(name).key == key


@pytest.mark.parametrize(
    "name", ["H100 SXM5 80GB", "NVIDIA_H100_80GB_HBM3", "h100", "H100 PCIe", "A100 SXM4 40GB", "NVIDIA A100-SXM4-80GB"]
)
def test_a_name_that_says_the_variant_has_no_note(name):
    assert resolve(name)[1] is None


def test_a_bare_a100_is_the_80gb_sxm_card_and_says_so():
    # hybridplan lists four A100s (40/80 GB, SXM4/PCIe): "a100" picks the 80 GB SXM4 one
    g, note = resolve("a100")
    assert g.key == "a100-80g"
    assert note is not None and "NVIDIA A100-SXM4-80GB" in note
    for other in ("a100-40g", "a100-40g-pcie", "a100-80g-pcie"):
        assert other in note


def test_a_size_without_the_form_factor_says_which_was_taken():
    # an H100 80GB is the SXM card or the PCIe card (nvidia-smi names both 80GB): the SXM one, and the note says
    g, note = resolve("h100-80gb")
    assert g.key == "h100" and note is not None and "h100-pcie" in note
    g, note = resolve("a100-80gb")
    assert g.key == "a100-80g" and note is not None and "a100-80g-pcie" in note


def test_the_bare_name_note_reaches_fit(run_cli):
    code, out, err = run_cli("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "a100", "--engine", "vllm", "--json")
    assert code in (0, 1), err
    d = json.loads(out)
    assert any("'a100' is taken as the NVIDIA A100-SXM4-80GB" in n for n in d["notes"])
    code, out, err = run_cli(
        "fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "a100-80g", "--engine", "vllm", "--json"
    )
    assert not any("is taken as" in n for n in json.loads(out)["notes"])


@pytest.mark.parametrize(
    "name,family",
    [
        # an H100 spelling that names no listed card gets H100s, not A100s (the report)
        ("h100-96gbx", ("h100", "h100-pcie", "h100-nvl")),
        ("H100 SXM5 120GB", ("h100", "h100-pcie", "h100-nvl")),
        ("a100 24gb", ("a100-40g", "a100-40g-pcie", "a100-80g")),
    ],
)
def test_an_unknown_variant_suggests_its_own_family_first(name, family):
    with pytest.raises(PlanError) as e:
        gpu(name)
    said = str(e.value).split("did you mean ", 1)[1].split("?", 1)[0]
    assert said.split(" or ") == list(family)


def test_a_card_without_its_model_word_is_another_card():
    # the RTX 5070 is not the RTX 5070 Ti (12 GB against 16 GB): refused, with the Ti suggested
    with pytest.raises(PlanError, match="did you mean rtx-5070-ti"):
        gpu("rtx 5070")


def test_an_unknown_gpu_is_one_line_and_exit_2(run_cli):
    # "NVIDIA GeForce RTX 5060 Ti 16 GB" is how tests/data/logs/vllm-0.23.0-qwen3.6-27b-fp8-mtp-4xrtx5060ti-1.log
    # names its GPU; hybridplan has no figure for it yet
    one_line_error(
        *run_cli("fit", "nemotron-h", "--gpu-type", "NVIDIA GeForce RTX 5060 Ti 16 GB"),
        "unknown GPU 'NVIDIA GeForce RTX 5060 Ti 16 GB'",
        "--gpu-mem",
    )


def test_every_listed_spelling_still_names_its_own_card():
    for g in GPUS:
        for n in (g.key, g.name, *g.aliases):
            assert gpu(n) is g, n


def test_gpus_header_is_the_guides_word(run_cli):
    # the guide: "**from** says where it was read" (docs/guide.md, `gpus`)
    _, out, _ = run_cli("gpus")
    header = next(line for line in out.splitlines() if line.startswith("gpu "))
    assert header.split()[-1] == "from"
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    shown = guide.split("$ hybridplan gpus", 1)[1]
    assert "**from** says where" in guide
    assert next(line for line in shown.splitlines() if line.startswith("gpu ")).split()[-1] == "from"
