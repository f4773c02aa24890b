#!/usr/bin/env bash
# GPU measurements of the autotuned projections (chapter 25): every GEMV config at the decode shapes with
# the autotuner's pick and chapter 05's marked, the cost of tuning against the number of configs, the
# prefill GEMM keyed on the prompt length against its bucket, and the on-disk caches across processes.
# Called by scripts/gpu_check.sh with one argument.
#   scripts/gpu_extra_autotune.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_autotune.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITONLLM_KERNELS=solutions
exec $PY -m tritonllm_course.autotune_bench --out "$OUT"
