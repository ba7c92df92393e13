#!/usr/bin/env bash
# Everything that needs a GPU, in one run: the kernel tests on the GPU, the kernel benchmark, then
# `hybridplan profile --save-calibration` on three models, each calibration checked against its own profile's
# measured step (benchmarks/profile_gpu.sh, benchmarks/calibrated_step.py). Results go to $OUT, else benchmarks/results/.
#
#   benchmarks/gpu_all.sh [GPU_INDEX]
#
# Needs no network and installs nothing: PYTHON (default python3) must hold torch, triton, nvidia-ml-py,
# typer, rich, pyyaml and pytest, as a CUDA image usually does. Where hybridplan itself is not installed, it runs
# from a copy of this checkout laid out as the wheel lays it out (kernels/ and model_specs/ go under hybridplan/).
# PACK=1 puts every result file into one $OUT/gpu-results.tar.gz (for a machine that returns few files).
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=$(realpath -m "${OUT:-benchmarks/results}")
mkdir -p "$FINAL"
if [ -n "${PACK:-}" ]; then export OUT=$(mktemp -d); else export OUT=$FINAL; fi
export PYTHON=${PYTHON:-python3}
unset TRITON_INTERPRET

if ! (cd / && "$PYTHON" -c "import hybridplan.kernels") 2>/dev/null; then
  stage=$(mktemp -d)
  cp -r hybridplan tests benchmarks pyproject.toml "$stage"/ && cp -r kernels "$stage/hybridplan/kernels" &&
    cp -r model_specs "$stage/hybridplan/model_specs" || exit 2
  cd "$stage"
  export PYTHONPATH="$stage${PYTHONPATH:+:$PYTHONPATH}"  # for the tests' subprocesses too
  echo "running from $stage (this checkout laid out as installed)" >&2
fi
missing=$("$PYTHON" -c 'import importlib.util as u
print(" ".join(m for m in ("torch", "triton", "pynvml", "typer", "rich", "yaml", "pytest") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
  echo "gpu_all.sh: $PYTHON lacks $missing (pip install -e '.[gpu]' pytest)" >&2
  exit 2
fi

status=0
"$PYTHON" -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tail -3 | tee "$OUT/kernel-tests-gpu.txt" || status=1
"$PYTHON" benchmarks/kernels.py --out "$OUT/kernels.json" 2>&1 | tee "$OUT/kernels.txt" || status=1
benchmarks/profile_gpu.sh "${1:-0}" || status=1
if [ -n "${PACK:-}" ]; then
  tar -czf "$FINAL/gpu-results.tar.gz" -C "$OUT" . || status=1
fi
exit $status
