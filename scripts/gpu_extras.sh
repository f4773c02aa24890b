#!/usr/bin/env bash
# The GPU runs beyond the tests and the kernel table: benchmarks of the chapters (tritonllm_course/measure/,
# the engine, the profile) and the lab's experiments (lab/). One per call; scripts/gpu_check.sh calls each
# of the table below in turn (its `extra` step; EXTRAS="engine profile" picks some).
#   scripts/gpu_extras.sh NAME RESULTS_DIR      run one (PYTHON=... to choose the interpreter)
#   scripts/gpu_extras.sh --list                the names, in the table's order
#
# name        what it measures (the chapters, by slug)
# autotune    the autotuned projections (26_autotune): every GEMV config at the decode shapes with the autotuner's
#             pick and chapter 05_projections's marked, the cost of tuning against the number of configs, the prefill
#             GEMM keyed on the prompt length against its bucket, the on-disk caches across processes
# claims      the 21-operator article's small claims (05_projections, 06_rope): merged q/k/v against separate
#             projections (lab/qkv_merge_probe.py), RoPE from a cos/sin table against tl.cos / tl.sin
#             (lab/rope_trig_probe.py)
# compilers   AI compilers and Triton (28_compilers): the GEMM with a fused GELU epilogue against cuBLAS + F.gelu and
#             torch.compile, GELU erf against tanh, the course's projection against cuBLAS over 32 shapes,
#             Inductor's generated code for the end of a layer (RESULTS_DIR/inductor_<gpu>_<date>/)
# delta_rule  the gated delta rule (15_delta_rule, 16_delta_rule_chunked): decode step, chunked prefill against
#             transformers' PyTorch path and flash-linear-attention, accuracy in bf16
# engine      the whole model (19_engine, 27_finale): transformers eager and compiled, the reference model eager and
#             compiled, the Triton engine at each level, each without and with the CUDA graph; prefill of
#             128 tokens, decode at contexts 128, 1024 and 4096, random weights of the real shapes; writes
#             RESULTS_DIR/engine_<gpu>_<date>/bench.{md,json,png}. It starts no new system after BUDGET_S
#             seconds (default 400) and is stopped 70 s later: what was measured by then is written.
# family      the dense Qwen3.5 family (27_finale): each size (0.8B to 27B) with random weights of its real shapes,
#             bf16, every engine level under its CUDA graph beside transformers eager and static + compile,
#             decode at 128, 2,048 and 4,096 cached tokens and prefill of 128 and 2,048 tokens, one process a
#             size (tritonllm_course/measure/family.py; SIZES="qwen3.5-4b ..." picks some); then the table
#             and plot of all sizes under RESULTS_DIR, RESULTS_DIR/family_<gpu>_<date>.{md,json,png}; TILES=1
#             instead: the whole-tile PDL GEMV against walking K at 4B, 9B and 27B (lab/family_tile_probe.py)
# flash       FlashAttention and FlashDecoding (23_flash_attention, 25_flash_decoding): prefill against chapter
#             08_attention's kernels and PyTorch SDPA, tile sizes, decode over cache lengths, split counts, bf16
#             accuracy
# gemv        the lab's experiments on the decode GEMVs (05_projections, 21_norm_fusion), each lab/<probe>.py writing
#             RESULTS_DIR/<probe's name>_<gpu>_<date>.json: the config sweep (and its PNG), the persistent
#             GEMV, the L2 prefetch, the MLP block and the layer's phases as one kernel, a GEMV cut down
#             step by step, the TMA GEMV, the unrolled walk, the other decode kernels' launch parameters,
#             the token loop against its replays queued back to back
# graphs      decode steps per CUDA graph (18_cuda_graphs, lab/multistep_graph_probe.py): the engine's one step a
#             replay against 2, 4 and 8 steps captured in one graph, the steps fenced by a copy or a kernel, or
#             overlapped by PDL, tokens compared
# ladder      the naive-to-fast ladder (29_naive_to_fast): every step from one program per output to the fewest kernels
#             + PDL, prefill of 128 tokens and decode at 128 cached tokens, each step's tokens checked in fp32;
#             RESULTS_DIR/ladder_<gpu>_<date>.{json,md,png}
# layers      the engine per layer and per kind of layer (20_profile): every level, a 128-token prompt and decode at
#             128 and 4,096 cached tokens; RESULTS_DIR/layers_<gpu>_<date>.{json,md,png}
# pdl         programmatic dependent launch (18_cuda_graphs, lab/pdl_chain_probe.py): the decode GEMV chain with and
#             without it, where its loads sit in the SASS, a read before the wait; then the engine's fast
#             level replayed from its CUDA graph with and without PDL beside transformers + torch.compile,
#             decode at 128 and 4,096 cached tokens, the tokens of both compared; before it the step's
#             time kernel by kernel under PDL (lab/pdl_step_profile.py), its variants (lab/pdl_variants_probe.py),
#             FlashDecoding's past rows before the wait (lab/flash_decoding_prefetch_probe.py) and the layers'
#             launches under PDL: the attention layer's in one (lab/attention_launch_probe.py), the DeltaNet
#             layer's launch shapes, where its recurrence and FlashDecoding's merge let the next kernel launch,
#             and its recurrence inside the in-projection (lab/deltanet_pdl_probe.py,
#             lab/deltanet_head_fusion_probe.py), the wide-K projections split along K (lab/splitk_pdl_probe.py)
# prefill     the lab's prompt experiment (16_delta_rule_chunked, 22_layer_fusion, 21_norm_fusion,
#             lab/prefill_probe.py): the chunked delta rule's chunk size and value block, the GEMM + residual's
#             tiles and a split-K version at M = 128, the gated MLP GEMM's tiles
# prompt      the prompt's kernels against the strongest libraries (16_delta_rule_chunked, 22_layer_fusion): the prompt
#             GEMMs' tiles, a TMA form and a split-K form against cuBLAS at M = 128 to 4,096
#             (lab/prompt_gemm_sweep.py), then the chunked delta rule against flash-linear-attention, kernel by
#             kernel (lab/delta_rule_kernels_probe.py; fla installed for that run only, as for delta_rule); the
#             first kernel on 16-bit operands and split in two (lab/delta_rule_operands_probe.py, adopted), the
#             rule in one launch (lab/delta_rule_fused_probe.py) and the blocked UT transform
#             (lab/delta_rule_prepare_probe.py) were measured and run on their own
# quant       8-bit weights (31_weight_quant): the per-group int8 GEMV's tiles (lab/quant_group_probe.py), then
#             the engine's decode by weight format beside bf16 and transformers,
#             with the accuracy figures (tritonllm_course/measure/weights_bench.py), then the 8-bit prompt GEMMs
#             with the widened weight as the tensor cores' first operand, and the TTFT with them
#             (lab/quant_gemm_probe.py); lab/quant_tile_probe.py (the 8-bit decode GEMVs' tiles) runs on its own
# profile     the reference model's eager decode, kernels and GPU time a token (02_inside_qwen35,
#             RESULTS_DIR/eager_profile_<gpu>_<date>.*), then the engine's decode step per kernel and per slot
#             (20_profile), op by op and from the CUDA graph, every level at 128 cached tokens, the fast one at
#             4,096 too; RESULTS_DIR/profile_<gpu>_<date>.* (CONFIG=qwen3.5-27b: another size of the family,
#             profile_<config>_<gpu>_<date>.*, without the eager profile)
# splitk      the split-K GEMV (24_split_k): time against the number of pieces, against chapter 05_projections's GEMV
#             and cuBLAS at the narrow decode shapes and the LM head, the atomic reduction's run-to-run spread
# targets     the prompt and decode targets in one process (19_engine, 27_finale): a random checkpoint of the real
#             shapes written by transformers, then the fast level with and without PDL (CUDA graphs) beside
#             transformers eager with flash-linear-attention installed (its DeltaNet kernels), the time to the first
#             token after prompts of 128, 1,024, 4,000 and 4,096 tokens and decode at each, tokens compared;
#             RESULTS_DIR/engine_<gpu>_<date>/ (tritonllm-course bench --model DIR)
# ttft        the time to the first token (05_projections, 18_cuda_graphs, lab/tma_ttft_probe.py): the TMA prompt
#             GEMMs against the pointer ones and PDL against pdl=False, engines alternated, 128 to 4,000 tokens
set -uo pipefail
NAMES="autotune claims compilers delta_rule engine family flash gemv graphs ladder layers pdl prefill prompt quant"
NAMES="$NAMES profile splitk targets ttft"
if [ "${1:-}" = "--list" ]; then
  echo $NAMES
  exit 0
fi
NAME=${1:?usage: scripts/gpu_extras.sh NAME RESULTS_DIR | --list}
OUT=${2:?usage: scripts/gpu_extras.sh NAME RESULTS_DIR | --list}
[[ " $NAMES " == *" $NAME "* ]] || { echo "scripts/gpu_extras.sh: no extra named $NAME (one of: $NAMES)" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
# the course and lab/ importable from anywhere (python -m lab.<probe>)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

autotune() {
  export TRITONLLM_KERNELS=solutions
  exec $PY -m tritonllm_course.measure.autotune_bench --out "$OUT"
}

claims() {
  export TRITONLLM_KERNELS=solutions
  local status=0
  timeout 120 $PY -m lab.qkv_merge_probe "$OUT" || status=1
  timeout 120 $PY -m lab.rope_trig_probe "$OUT" || status=1
  exit $status
}

compilers() {
  export TRITONLLM_KERNELS=solutions
  exec timeout 300 $PY -m tritonllm_course.measure.compiler_bench --out "$OUT"
}

with_fla() {
  # flash-linear-attention is the peer to beat. If it is not installed but its wheel was carried in .whl/,
  # install it for this run only (the tests must not see it: transformers would route Qwen3.5 through it).
  if ! $PY -c "import fla" 2>/dev/null; then
    local wheel site
    wheel=$(ls "$ROOT"/.whl/fla_core-*.whl 2>/dev/null | head -n 1)
    if [ -n "$wheel" ]; then
      site=$(mktemp -d)
      $PY -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" \
        && export PYTHONPATH="$PYTHONPATH:$site"
    fi
  fi
}

delta_rule() {
  with_fla
  exec $PY -m tritonllm_course.measure.delta_rule_bench --out "$OUT"
}

engine() {
  export TRITONLLM_KERNELS=solutions
  local budget=${BUDGET_S:-400}
  exec timeout $((budget + 70)) $PY -m tritonllm_course.cli bench --out "$OUT" --budget-s "$budget"
}

flash() {
  export TRITONLLM_KERNELS=solutions
  exec $PY -m tritonllm_course.measure.flash_bench --out "$OUT"
}

gemv() {   # each probe under its own time limit; one that fails does not stop the others
  export TRITONLLM_KERNELS=solutions
  local status=0
  SWEEP_S=${SWEEP_S:-120} timeout 200 $PY -m lab.gemv_sweep "$OUT" || status=1
  PROBE_S=${PROBE_S:-150} timeout 230 $PY -m lab.gemv_persistent_probe "$OUT" || status=1
  timeout 150 $PY -m lab.l2_prefetch_probe "$OUT" || status=1
  timeout 150 $PY -m lab.mlp_block_probe "$OUT" || status=1
  timeout 150 $PY -m lab.layer_phases_probe "$OUT" || status=1
  timeout 150 $PY -m lab.gemv_bounds_probe "$OUT" || status=1
  timeout 400 $PY -m lab.gemv_tma_probe "$OUT" || status=1
  timeout 200 $PY -m lab.unrolled_gemv_probe "$OUT" || status=1
  timeout 330 $PY -m lab.decode_small_sweep "$OUT" || status=1
  timeout 150 $PY -m lab.decode_overlap_probe "$OUT" || status=1
  exit $status
}

graphs() {
  export TRITONLLM_KERNELS=solutions
  exec timeout 240 $PY -m lab.multistep_graph_probe "$OUT"
}

targets() {
  export TRITONLLM_KERNELS=solutions
  with_fla
  local ckpt
  ckpt=$(mktemp -d)
  timeout 180 $PY -c "import sys, torch; from tritonllm_course.config import QWEN35_0_8B
from tritonllm_course.hf_compat import hf_model
hf_model(QWEN35_0_8B, dtype=torch.bfloat16, device='cuda').save_pretrained(sys.argv[1])" "$ckpt" || exit 1
  exec timeout 460 $PY -m tritonllm_course.cli bench --model "$ckpt" --out "$OUT" --contexts 128 1024 4000 4096 \
    --budget-s 380 --systems "transformers eager" "Triton, fewest kernels + CUDA Graph" \
    "Triton, fewest kernels + CUDA Graph + PDL"
}

ttft() {
  export TRITONLLM_KERNELS=solutions
  exec timeout 240 $PY -m lab.tma_ttft_probe "$OUT"
}

ladder() {
  export TRITONLLM_KERNELS=solutions
  exec timeout 300 $PY -m tritonllm_course.ladder --out "$OUT"
}

layers() {
  export TRITONLLM_KERNELS=solutions
  exec timeout 240 $PY -m tritonllm_course.measure.layer_times --out "$OUT"
}

pdl() {
  export TRITONLLM_KERNELS=solutions
  local status=0
  timeout 240 $PY -m lab.pdl_chain_probe "$OUT" || status=1
  timeout 150 $PY -m lab.pdl_step_profile "$OUT" || status=1
  timeout 200 $PY -m lab.pdl_variants_probe "$OUT" || status=1
  timeout 200 $PY -m lab.flash_decoding_prefetch_probe "$OUT" || status=1
  timeout 300 $PY -m lab.attention_launch_probe "$OUT" || status=1
  timeout 400 $PY -m lab.deltanet_pdl_probe "$OUT" || status=1
  timeout 300 $PY -m lab.splitk_pdl_probe "$OUT" || status=1
  timeout 300 $PY -m lab.deltanet_head_fusion_probe "$OUT" || status=1
  timeout 420 $PY -m tritonllm_course.cli bench --out "$OUT" --contexts 128 4096 --budget-s 330 --systems \
    "Triton, fewest kernels + CUDA Graph + PDL" "Triton, fewest kernels + CUDA Graph" "transformers static + compile" \
    || status=1
  exit $status
}

prefill() {
  export TRITONLLM_KERNELS=solutions
  PROBE_S=${PROBE_S:-120} exec timeout 400 $PY -m lab.prefill_probe "$OUT"
}

prompt() {   # each under its own time limit, one that fails does not stop the others: the delta rule's probe
  # first, then the GEMM sweep (a call cut short keeps what each saved; the sweep's other
  # prompt lengths: MS="128 512 2048" python -m lab.prompt_gemm_sweep, on its own)
  export TRITONLLM_KERNELS=solutions
  local status=0
  with_fla
  PROBE_S=${PROBE_S:-150} timeout 220 $PY -m lab.delta_rule_kernels_probe "$OUT" || status=1
  SWEEP_S=${SWEEP_S:-230} timeout 300 $PY -m lab.prompt_gemm_sweep "$OUT" || status=1
  exit $status
}

quant() {   # within one 10-minute call: weights_bench writes its files at the end, so it has the larger share;
  # the GEMM probe saves after every case (a run cut short: python -m lab.quant_gemm_probe, on its own)
  export TRITONLLM_KERNELS=solutions
  local status=0
  PROBE_S=90 timeout 150 $PY -m lab.quant_group_probe "$OUT" || status=1
  timeout 200 $PY -m tritonllm_course.measure.weights_bench --out "$OUT" || status=1
  PROBE_S=${PROBE_S:-150} timeout 230 $PY -m lab.quant_gemm_probe "$OUT" || status=1
  exit $status
}

profile() {   # the reference model's eager decode first (a minute at most), then the engine's profile
  export TRITONLLM_KERNELS=solutions
  local status=0
  [ -z "${CONFIG:-}" ] && { timeout 90 $PY -m tritonllm_course.measure.eager_profile --out "$OUT" || status=1; }
  timeout 300 $PY -m tritonllm_course.measure.profiling --out "$OUT" ${CONFIG:+--config $CONFIG} || status=1
  exit $status
}

family() {
  export TRITONLLM_KERNELS=solutions
  [ -n "${TILES:-}" ] && { timeout 500 $PY -m lab.family_tile_probe "$OUT"; exit $?; }
  exec $PY -m tritonllm_course.measure.family --out "$OUT" ${SIZES:+--sizes $SIZES} --budget-s "${BUDGET_S:-240}"
}

splitk() {
  exec $PY -m tritonllm_course.measure.splitk_bench --out "$OUT"
}

"$NAME"
