#!/usr/bin/env bash
# GPU benchmark of the whole model (chapters 19 and 26): transformers eager and compiled, the reference model
# eager and compiled, the Triton engine one kernel per operator, with fusion + split-K and with the fewest
# kernels (level "fast"), each without and with the CUDA graph; prefill of 128 tokens and decode at
# contexts 128, 1024 and 4096, random weights of the real shapes. Called by scripts/gpu_check.sh with one
# argument; writes RESULTS_DIR/engine_<gpu>_<date>/bench.{md,json,png}.
#   scripts/gpu_extra_engine.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
# The run starts no new system after BUDGET_S seconds (default 400) and is stopped 70 s later: what was
# measured by then is written.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_engine.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITONLLM_KERNELS=solutions
BUDGET_S=${BUDGET_S:-400}
exec timeout $((BUDGET_S + 70)) $PY -m tritonllm_course.cli bench --out "$OUT" --budget-s "$BUDGET_S"
