"""How vLLM is deployed from a file: its ``--config`` YAML, its image, its port and health endpoint.

- ``vllm serve --config FILE`` (vllm/utils/__init__.py ``FlexibleArgumentParser.load_config_file`` in
  0.10.0-0.14.x, vllm/utils/argparse_utils.py from 0.15.0 to 0.33.0) turns each top-level key into ``--key``:
  ``true`` adds the bare switch, a string or number becomes its value; ``model:`` stands for the positional
  model (``_pull_args_from_config``: "model either as a positional argument or in a config file"). The command
  line wins over the file. A ``false`` is dropped in 0.10 and a nested mapping is not JSON-encoded there, so a
  file that holds for every release writes each switch as ``KEY: true`` (``no-enable-prefix-caching: true``)
  and each JSON-valued flag (``--speculative-config``) as a JSON string.
- The image: ``vllm/vllm-openai:vX.Y.Z``, one per release; its entrypoint runs ``vllm serve``.
- Data parallelism: ``--data-parallel-size N`` on a dense model runs N independent engines behind one API
  server; they can as well be N replicas of one engine. A MoE model's layers shard over all data × tensor ranks
  (vllm/model_executor/layers/fused_moe/config.py ``FusedMoEParallelConfig.make``), which ties the ranks into
  one server.
- The HTTP server: port 8000 (vllm/entrypoints/common/cli_args.py ``port: int = 8000``, 0.33.0), on every
  interface; ``GET /health`` answers 200 once the engine is up (vllm/entrypoints/serve/instrumentator/health.py).
"""

from __future__ import annotations

#: the first release this file format is written for (the oldest release hybridplan models)
CONFIG_FROM = "0.10.0"
PORT = 8000
HEALTH = "/health"


def image(version: str) -> str:
    return f"vllm/vllm-openai:v{version}"


#: the key the positional model is written under (``vllm serve MODEL``), and the program a file is run with
POSITIONAL_MODEL = "model"
RUN = "vllm serve --config"


def program_length(argv: tuple[str, ...]) -> int:
    """The tokens of ``argv`` before its flags: ``vllm serve`` (the model follows, as ``model:``)."""
    return 2


def server_command(config_path: str) -> tuple[list[str], list[str]]:
    """The container's command and arguments: ``vllm serve`` with the file (it listens on every interface)."""
    return ["vllm", "serve"], ["--config", config_path]


def dp_replicas(sc) -> bool:
    """Whether the data-parallel ranks may run as independent replicas of one engine."""
    return "moe" not in sc.spec.ffn and not sc.expert_parallel


def node_commands(config_path: str, nodes: int) -> tuple[list[str], list[str]]:
    """A replica over ``nodes`` nodes (a LeaderWorkerSet group): vLLM spans nodes through a Ray cluster, the
    leader's head and each worker joined to it (docs/serving/distributed_serving, ``--distributed-executor-backend
    ray``); the leader serves. LWS_LEADER_ADDRESS is the leader's address the LeaderWorkerSet gives every pod."""
    leader = f"ray start --head --port=6379 && vllm serve --config {config_path} --distributed-executor-backend ray"
    worker = "ray start --address=${LWS_LEADER_ADDRESS}:6379 --block"
    return ["sh", "-c", leader], ["sh", "-c", worker]
