#!/usr/bin/env bash
# GPU experiments on a prompt's kernels (chapters 16, 21 and 26): the chunked delta rule's chunk size and
# value block at T = 128 / 512 / 4096, the GEMM + residual's tiles and a split-K version of it at M = 128,
# the gated MLP GEMM's tiles (scripts/prefill_probe.py). Called by scripts/gpu_check.sh with one argument;
# writes RESULTS_DIR/prefill_probe_<gpu>_<date>.json.
#   scripts/gpu_extra_prefill.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_prefill.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITONLLM_KERNELS=solutions
PROBE_S=${PROBE_S:-120} exec timeout 400 $PY "$ROOT/scripts/prefill_probe.py" "$OUT"
