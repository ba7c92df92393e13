"""MODEL as a Hugging Face Hub id: from a Hub cache laid out as huggingface_hub lays it out (built here, under a
temporary HF_HOME), with the network off; the shipped specs answer their own ids with no cache at all; every
failure is one line and exit code 2. The network is never used: where an answer from the Hub is needed, the
download call is replaced by one that raises what huggingface_hub raises."""

import json

import httpx2
import pytest
from huggingface_hub import errors

from hybridplan import hub
from tests.conftest import CONFIGS
from tests.helpers import one_line_error

pytestmark = pytest.mark.cli

REV = "0123456789abcdef0123456789abcdef01234567"


def _cache(home, repo_id: str, config: dict, rev: str = REV, main: bool = True) -> None:
    """models--org--name/snapshots/<rev>/config.json and refs/main, as huggingface_hub writes them."""
    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    if main:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(rev)


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_a_cached_hub_id_by_id_and_by_revision(run_cli, hf_home):
    _cache(hf_home, "acme/Next-80B", json.loads((CONFIGS / "Qwen__Qwen3-Next-80B-A3B-Thinking.json").read_text()))
    code, out, err = run_cli("size", "acme/Next-80B", "--ctx", "8192", "--json")
    d = json.loads(out)
    assert code == 0, err
    # the same numbers as the shipped Qwen3-Next spec, whose config it is: 36 GDN + 12 attention layers
    assert d["layers"]["gdn"] == 36 and d["layers"]["attention"] == 12
    assert any("shipped spec qwen3-next-80b-a3b" in n for n in d["notes"])
    code, out, _ = run_cli("size", "acme/Next-80B", "--revision", REV, "--json")
    assert code == 0
    one_line_error(*run_cli("size", "acme/Next-80B", "--revision", "v2"), "acme/Next-80B@v2 is not in the local")


def test_a_config_of_its_own_is_sized_as_read(run_cli, hf_home):
    # a fine-tune of Qwen3.5-35B-A3B with a longer context: not a shipped spec's config any more
    cfg = json.loads((CONFIGS / "Qwen__Qwen3.5-35B-A3B.json").read_text())
    cfg["text_config"]["max_position_embeddings"] = 1_048_576
    _cache(hf_home, "acme/Hybrid-35B", cfg)
    code, out, _ = run_cli("size", "acme/Hybrid-35B", "--json")
    d = json.loads(out)
    assert code == 0 and d["model"] == "Hybrid-35B" and d["layers"]["gdn"] == 30 and d["layers"]["attention"] == 10
    assert d["ctx"] == 1_048_576


def test_offline_miss(run_cli, hf_home):
    one_line_error(
        *run_cli("size", "acme/Not-Cached"),
        "acme/Not-Cached is not in the local Hugging Face cache and the Hub cannot be reached (HF_HUB_OFFLINE is set)",
    )


def test_shipped_specs_answer_their_ids_with_no_cache(run_cli, hf_home):
    code, out, err = run_cli("size", "nvidia/Nemotron-H-8B-Base-8K", "--ctx", "8192", "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "nemotron-h-8b" and not (hf_home / "hub").exists()


def test_a_path_on_disk_wins_over_a_hub_id(run_cli, hf_home, tmp_path, monkeypatch):
    folder = tmp_path / "nvidia" / "Nemotron-H-8B-Base-8K"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((CONFIGS / "LiquidAI__LFM2-1.2B.json").read_text())
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("size", "nvidia/Nemotron-H-8B-Base-8K", "--json")
    assert code == 0 and "short_conv" in json.loads(out)["layers"]


def _response(status: int) -> httpx2.Response:
    return httpx2.Response(
        status, request=httpx2.Request("GET", "https://huggingface.co/acme/x/resolve/main/config.json")
    )


@pytest.mark.parametrize(
    "raised,needle",
    [
        (errors.GatedRepoError("gated", response=_response(403)), "acme/Model is gated: accept its terms"),
        (errors.RepositoryNotFoundError("missing", response=_response(404)), "no model acme/Model on the Hugging Face"),
        (errors.RevisionNotFoundError("no rev", response=_response(404)), "acme/Model has no revision"),
        (
            errors.RemoteEntryNotFoundError("no file", response=_response(404)),
            "acme/Model has no config.json: it holds GGUF files only",
        ),
    ],
)
def test_hub_answers_areone_line_error(run_cli, hf_home, monkeypatch, raised, needle):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)

    def download(*args, **kwargs):
        raise raised

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda *a, **k: ["model-Q4_K_M.gguf", "README.md"])
    one_line_error(*run_cli("size", "acme/Model", *(["--revision", "v9"] if "revision" in needle else [])), needle)


def test_no_network_answers_at_once(run_cli, hf_home, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: False)
    one_line_error(*run_cli("size", "acme/Model"), "the Hub cannot be reached (no answer from https://huggingface.co)")


def test_revision_is_for_hub_ids_only(run_cli):
    one_line_error(*run_cli("size", "nemotron-h", "--revision", "main"), "--revision is for a Hugging Face Hub id")


def test_models_lists_the_hub_ids(run_cli):
    code, out, _ = run_cli("models", "--json")
    sources = {m["source"] for m in json.loads(out)["models"]}
    assert "nvidia/Nemotron-H-8B-Base-8K" in sources and "Qwen/Qwen3-Next-80B-A3B-Instruct" in sources


# --- a shipped spec's Hub id and address, offline -----------------------------------------------------------


def test_revision_main_of_a_shipped_hub_id_needs_no_network(run_cli, monkeypatch):
    # nvidia/Nemotron-H-8B-Base-8K is the source of the shipped nemotron-h-8b, which notes no revision of its own
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, js, err = run_cli("size", "nvidia/Nemotron-H-8B-Base-8K", "--revision", "main", "--json")
    assert code == 0, err
    assert json.loads(js)["model"] == "nemotron-h-8b"


@pytest.mark.parametrize(
    "url",
    [
        "https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K",
        "huggingface.co/nvidia/Nemotron-H-8B-Base-8K/tree/main",
        "https://hf.co/nvidia/Nemotron-H-8B-Base-8K/",
    ],
)
def test_a_hub_address_is_read_as_its_id(run_cli, monkeypatch, url):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, js, err = run_cli("size", url, "--json")
    assert code == 0, err
    assert json.loads(js)["model"] == "nemotron-h-8b"


def test_a_hub_address_and_another_revision_disagree(run_cli):
    code, _, err = run_cli("size", "https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K/tree/v1", "--revision", "v2")
    assert code == 2 and "names revision 'v1' but --revision says 'v2'" in err
