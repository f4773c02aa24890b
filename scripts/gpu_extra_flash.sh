#!/usr/bin/env bash
# GPU benchmark of FlashAttention and FlashDecoding (chapters 22 and 24): prefill against chapter 08's kernels
# and PyTorch SDPA, tile sizes, decode against chapter 08 and PyTorch over cache lengths, split counts, bf16
# accuracy. Called by scripts/gpu_check.sh with one argument.
#   scripts/gpu_extra_flash.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_flash.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITONLLM_KERNELS=solutions
exec $PY -m tritonllm_course.flash_bench --out "$OUT"
