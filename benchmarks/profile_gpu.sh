#!/usr/bin/env bash
# `hybridplan profile` on a CUDA GPU: the planner's pools allocated for real, the recurrent kernels timed.
#
#   benchmarks/profile_gpu.sh [GPU_INDEX]
#
# Runs Nemotron-H-8B (Mamba-2: every kernel), then Jamba (Mamba-1) and Qwen3-Next (Gated DeltaNet): their
# conv kernels and decode updates, and "no kernel" for their prefill scans,
# each as JSON and as the table, into $OUT when it is set, else benchmarks/results/. PYTHON (default: .venv's
# when its torch sees a GPU, else python3) must hold hybridplan with its gpu extra (pip install -e '.[gpu]').
# Exits non-zero if any run fails or any allocation differs from its prediction.
set -uo pipefail

GPU=${1:-0}
DEST=${OUT:-$(dirname "$0")/results}
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
if ! "$PY" -c "import hybridplan.kernels, torch, triton, pynvml" 2>/dev/null; then
  echo "profile_gpu.sh: $PY lacks hybridplan, torch, triton or nvidia-ml-py: pip install -e '.[gpu]'" >&2
  exit 2
fi

{
  nvidia-smi || true
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} >"$DEST/profile-env.txt" 2>&1

status=0
for model in nemotron-h jamba qwen3-next; do
  echo "== $model (GPU $GPU)" >&2
  # --save-calibration: what `hybridplan speed --calibration` reads (decode and scan figures of this GPU)
  if "$PY" -m hybridplan profile "$model" --gpu "$GPU" --json --save-calibration "$DEST/calibration-$model.json" \
       >"$DEST/profile-$model.json" 2>"$DEST/profile-$model.log"; then
    "$PY" -m hybridplan profile "$model" --gpu "$GPU" --bytes >"$DEST/profile-$model.txt" \
      2>>"$DEST/profile-$model.log" || status=1
    "$PY" - "$DEST/profile-$model.json" <<'PYEOF' || status=1
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
PYEOF
    # the calibrated prediction beside the profile's own measured decode step and prefill
    "$PY" benchmarks/calibrated_step.py "$DEST/profile-$model.json" "$DEST/calibration-$model.json" --json \
      >"$DEST/calibrated-step-$model.json" 2>>"$DEST/profile-$model.log" || status=1
  else
    status=1
    cat "$DEST/profile-$model.log" >&2
  fi
done
exit $status
