#!/usr/bin/env bash
# GPU profile of the engine's decode step (chapter 20): per kernel and per slot, op by op and from the CUDA
# graph, every optimisation level at 128 cached tokens, the fast one at 4,096 too. Called by
# scripts/gpu_check.sh with one argument; writes RESULTS_DIR/profile_<gpu>_<date>.{json,md,png}.
#   scripts/gpu_extra_profile.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_profile.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITONLLM_KERNELS=solutions
exec timeout 300 $PY -m tritonllm_course.profiling --out "$OUT"
