#!/usr/bin/env bash
# Everything that needs a GPU, in one run (for a lent GPU machine): the kernel benchmark, then
# `hybridplan profile` on three models. Results go to $OUT (else benchmarks/results/).
#
#   benchmarks/gpu_all.sh [GPU_INDEX]
set -uo pipefail
cd "$(dirname "$0")/.."
DEST=${OUT:-benchmarks/results}
mkdir -p "$DEST"
PY=${PYTHON:-python3}
if ! "$PY" -c "import hybridplan, torch, triton, pynvml" 2>/dev/null; then
  "$PY" -m pip install -q --disable-pip-version-check -e '.[gpu]' || exit 2
fi
unset TRITON_INTERPRET
status=0
"$PY" -m pytest -q tests/kernels 2>&1 | tail -3 | tee "$DEST/kernel-tests-gpu.txt" || status=1
"$PY" benchmarks/kernels.py --out "$DEST/kernels.json" 2>&1 | tee "$DEST/kernels.txt" || status=1
PYTHON="$PY" benchmarks/profile_gpu.sh "${1:-0}" || status=1
exit $status
