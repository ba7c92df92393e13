#!/usr/bin/env bash
# `hybridplan profile` on a CUDA GPU: the planner's pools allocated for real, the recurrent kernels timed.
#
#   benchmarks/profile_gpu.sh [GPU_INDEX]
#
# Runs Nemotron-H-8B (Mamba-2: every kernel), then Jamba (Mamba-1: conv kernels, "no kernel" for the scan)
# and Qwen3-Next (Gated DeltaNet: likewise), each as JSON and as the table. Writes everything to $OUT when it
# is set, else to benchmarks/results/. PYTHON picks the interpreter (default: .venv when its torch sees a GPU,
# else python3). When torch, triton or pynvml is missing it installs the gpu extra (from a package index) into
# a virtual environment, or into a system interpreter with PROFILE_GPU_INSTALL=1. Exits non-zero if any run
# fails or any allocation differs from its prediction.
set -uo pipefail
cd "$(dirname "$0")/.."

GPU=${1:-0}
DEST=${OUT:-benchmarks/results}
mkdir -p "$DEST"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ] &&
     .venv/bin/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    PY=.venv/bin/python
  else
    PY=python3
  fi
fi
unset TRITON_INTERPRET

if ! "$PY" -c "import hybridplan, torch, triton, pynvml" 2>/dev/null; then
  # install into a virtual environment freely; into a system interpreter only when asked to
  if "$PY" -c "import sys; sys.exit(sys.prefix == sys.base_prefix)" || [ "${PROFILE_GPU_INSTALL:-0}" = 1 ]; then
    echo "installing hybridplan[gpu] into $("$PY" -c 'import sys; print(sys.prefix)')" >&2
    "$PY" -m pip install -q --disable-pip-version-check -e '.[gpu]' || {
      echo "profile_gpu.sh: cannot install hybridplan[gpu] (torch, triton, nvidia-ml-py); install them first" >&2
      exit 2
    }
  else
    echo "profile_gpu.sh: $PY lacks hybridplan, torch, triton or nvidia-ml-py; set PYTHON to an interpreter that" \
         "has them, or PROFILE_GPU_INSTALL=1 to pip install -e '.[gpu]' into $PY" >&2
    exit 2
  fi
fi
"$PY" - <<'EOF' || exit 2
import sys, torch
if not torch.cuda.is_available():
    sys.exit("profile_gpu.sh: no CUDA GPU visible to torch")
EOF

# `hybridplan profile` once cli.py registers it; until then the command function behind a one-command app
run_profile() {
  "$PY" - "$@" <<'EOF'
import sys
from hybridplan import cli
if not any(c.name == "profile" for c in cli.app.registered_commands):
    from hybridplan.profile.command import profile
    cli.app.command(name="profile")(profile)
sys.exit(cli.main(["profile", *sys.argv[1:]]))
EOF
}

{
  nvidia-smi || true
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} >"$DEST/profile-env.txt" 2>&1

status=0
for model in nemotron-h jamba qwen3-next; do
  echo "== $model (GPU $GPU)" >&2
  if run_profile "$model" --gpu "$GPU" --json >"$DEST/profile-$model.json" 2>"$DEST/profile-$model.log"; then
    run_profile "$model" --gpu "$GPU" --bytes >"$DEST/profile-$model.txt" 2>>"$DEST/profile-$model.log" || status=1
    "$PY" - "$DEST/profile-$model.json" <<'EOF' || status=1
import json, sys
d = json.load(open(sys.argv[1]))
m, dev = d["memory"], d["device"]
gbs = lambda x: "—" if x is None else f"{x / 1e9:,.0f} GB/s"
print(f"{d['model']}: memory exact={m['exact']} predicted={m['predicted']['total_bytes']:,} "
      f"requested={m['measured']['allocator_requested_bytes']} allocated={m['measured']['allocator_allocated_bytes']} "
      f"| copy {gbs(dev['copy']['bandwidth_bytes_per_s'])} of peak {gbs(dev['peak_bandwidth_bytes_per_s'])} "
      f"| decode {gbs(d['decode']['measured']['bandwidth_bytes_per_s'])} "
      f"| prefill {gbs(d['prefill']['measured']['bandwidth_bytes_per_s'])}")
sys.exit(0 if m["exact"] else 1)
EOF
  else
    status=1
    cat "$DEST/profile-$model.log" >&2
  fi
done
exit $status
