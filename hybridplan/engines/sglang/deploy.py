"""How SGLang is deployed from a file: its ``--config`` YAML, its image, its port and health endpoint.

- ``python -m sglang.launch_server --config FILE`` came in 0.5.3rc2 (python/sglang/srt/server_args_config_parser.py,
  absent from the 0.5.2 and 0.5.3rc0 wheels; python/sglang/srt/utils/server_args_config_parser.py by 0.5.23):
  ``ConfigArgumentMerger`` turns each top-level key into ``--key`` (dashes or underscores, any long spelling of
  the flag), a store_true flag given ``true`` into the bare switch, anything else into ``--key value``; the
  command line wins over the file. A flag that takes several values is refused in a file, so the file holds
  single-valued flags and switches only.
- The image: ``lmsysorg/sglang:vX.Y.Z`` (docker/Dockerfile of each release; Docker Hub lmsysorg/sglang).
- Data parallelism: ``--dp-size N`` runs N workers under one server's data-parallel controller (and with
  ``--enable-dp-attention`` one engine): the ranks stay one server.
- The HTTP server: port 30000 and host 127.0.0.1 by default (python/sglang/srt/arg_groups/fields/serving.py,
  0.5.23), so a container is started with ``--host 0.0.0.0``; ``GET /health`` answers 200 once a request can be
  served (python/sglang/srt/entrypoints/http_server.py).
"""

from __future__ import annotations

CONFIG_FROM = "0.5.3rc2"
PORT = 30000
HEALTH = "/health"


def image(version: str) -> str:
    return f"lmsysorg/sglang:v{version}"


#: no positional model (``--model-path`` is a flag like the others); the program a file is run with
POSITIONAL_MODEL = None
RUN = "python -m sglang.launch_server --config"


def program_length(argv: tuple[str, ...]) -> int:
    """The tokens of ``argv`` before its flags: ``python -m sglang.launch_server`` or ``sglang serve``."""
    return 3 if argv[:1] == ("python",) or argv[:1] == ("python3",) else 2


def server_command(config_path: str) -> tuple[list[str], list[str]]:
    """The container's command and arguments: the server with the file, on every interface (its default host is
    127.0.0.1) and its port."""
    return ["python3", "-m", "sglang.launch_server"], [
        "--config",
        config_path,
        "--host",
        "0.0.0.0",
        "--port",
        str(PORT),
    ]


def dp_replicas(sc) -> bool:
    """Whether the data-parallel ranks may run as independent replicas of one engine: never, in one server."""
    return False


def node_commands(config_path: str, nodes: int) -> tuple[list[str], list[str]]:
    """A replica over ``nodes`` nodes (a LeaderWorkerSet group): every node runs the server with ``--nnodes``,
    its ``--node-rank`` and the leader's ``--dist-init-addr`` (python/sglang/srt/server_args.py); the leader,
    rank 0, serves. LWS_LEADER_ADDRESS and LWS_WORKER_INDEX are the LeaderWorkerSet's own variables."""
    run = (
        f"python3 -m sglang.launch_server --config {config_path} --host 0.0.0.0 --port {PORT} "
        f"--nnodes {nodes} --node-rank ${{LWS_WORKER_INDEX}} --dist-init-addr ${{LWS_LEADER_ADDRESS}}:20000"
    )
    return ["sh", "-c", run], ["sh", "-c", run]
