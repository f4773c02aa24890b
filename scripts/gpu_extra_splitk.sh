#!/usr/bin/env bash
# GPU measurements of the split-K GEMV (chapter 23): time against the number of pieces, the comparison
# with chapter 05's GEMV and cuBLAS at the narrow decode shapes and the LM head, and the run-to-run spread
# of the atomic reduction. Called by scripts/gpu_check.sh with one argument.
#   scripts/gpu_extra_splitk.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_splitk.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec $PY -m tritonllm_course.splitk_bench --out "$OUT"
