#!/usr/bin/env bash
# GPU experiments on the decode GEMVs (chapters 05 and 21): every config of the GEMV-family kernels at the
# real shapes, L2 cold (scripts/gemv_sweep.py), a persistent, software-pipelined GEMV against chapter
# 05's (scripts/gemv_persistent_probe.py), the next projection's weights prefetched into L2
# (scripts/l2_prefetch_probe.py), the MLP sublayer as one kernel with a grid barrier
# (scripts/mlp_block_probe.py), the fast level's own kernels as phases of one kernel
# (scripts/layer_phases_probe.py), a GEMV cut down step by step (scripts/gemv_bounds_probe.py), a GEMV fed by the
# TMA (scripts/gemv_tma_probe.py), the fused GEMV's walk along K unrolled (scripts/unrolled_gemv_probe.py), the launch parameters of the other decode kernels
# (scripts/decode_small_sweep.py) and the engine's token loop against its replays queued back to back
# (scripts/decode_overlap_probe.py). Called by scripts/gpu_check.sh with one argument; writes
# RESULTS_DIR/gemv_sweep_<gpu>_<date>.{json,png} and
# RESULTS_DIR/{gemv_persistent,l2_prefetch,mlp_block,layer_phases,gemv_bounds,gemv_tma,unrolled_gemv,decode_small_sweep,decode_overlap}_<gpu>_<date>.json.
#   scripts/gpu_extra_gemv.sh RESULTS_DIR        (PYTHON=... to choose the interpreter)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_extra_gemv.sh RESULTS_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITONLLM_KERNELS=solutions
status=0
SWEEP_S=${SWEEP_S:-120} timeout 200 $PY "$ROOT/scripts/gemv_sweep.py" "$OUT" || status=1
PROBE_S=${PROBE_S:-150} timeout 230 $PY "$ROOT/scripts/gemv_persistent_probe.py" "$OUT" || status=1
timeout 150 $PY "$ROOT/scripts/l2_prefetch_probe.py" "$OUT" || status=1
timeout 150 $PY "$ROOT/scripts/mlp_block_probe.py" "$OUT" || status=1
timeout 150 $PY "$ROOT/scripts/layer_phases_probe.py" "$OUT" || status=1
timeout 150 $PY "$ROOT/scripts/gemv_bounds_probe.py" "$OUT" || status=1
timeout 400 $PY "$ROOT/scripts/gemv_tma_probe.py" "$OUT" || status=1
timeout 200 $PY "$ROOT/scripts/unrolled_gemv_probe.py" "$OUT" || status=1
timeout 330 $PY "$ROOT/scripts/decode_small_sweep.py" "$OUT" || status=1
timeout 150 $PY "$ROOT/scripts/decode_overlap_probe.py" "$OUT" || status=1
exit $status
