#!/usr/bin/env bash
# GPU benchmark of the gated delta rule (chapters 15-16): decode step, chunked prefill against transformers'
# PyTorch path and flash-linear-attention, accuracy in bf16. Called by scripts/gpu_check.sh with one argument.
#   scripts/gpu_extra_delta_rule.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_delta_rule.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# flash-linear-attention is the peer to beat. If it is not installed but its wheel was carried in .whl/,
# install it for this run only (the tests must not see it: transformers would route Qwen3.5 through it).
if ! $PY -c "import fla" 2>/dev/null; then
  wheel=$(ls "$ROOT"/.whl/fla_core-*.whl 2>/dev/null | head -n 1)
  if [ -n "$wheel" ]; then
    site=$(mktemp -d)
    $PY -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" \
      && export PYTHONPATH="$PYTHONPATH:$site"
  fi
fi
exec $PY -m tritonllm_course.delta_rule_bench --out "$OUT"
