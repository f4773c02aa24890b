#!/usr/bin/env bash
# On a GPU machine, in one call: the test suite at real shapes (GPU mode), every notebook under nbval,
# and the benchmarks. Writes into DIR three files: summary.md, logs.tgz (every step's log, failures-*.log
# first to read: each failure written as it happens) and results.tgz (the benchmarks' JSON, markdown, PNG).
#   scripts/gpu_check.sh DIR [STEP...]
#     STEP: tests notebooks timing bench extra (default: all). tests and notebooks run side by side
#     (correctness only); timing, bench and extra run alone, one after the other.
#   EXTRAS="engine profile" runs only those of scripts/gpu_extras.sh's table (default: all of them)
#   EXTRA_TIMEOUT=seconds stops each of them after that long (default: no limit)
#   PYTHON=... chooses the interpreter (default python3); JOBS=N pytest workers per step (default 4)
# Works from a plain checkout: the course is put on PYTHONPATH, nothing is installed into the system.
# Wheels in .whl/ (scripts/fetch_gpu_wheels.sh) are installed into /tmp/site first when nbval is missing.
# A device call lasts at most 10 minutes: split the steps over calls (tests notebooks | extra | timing bench).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR [tests|notebooks|timing|bench|extra]...}
shift
STEPS=${*:-tests notebooks timing bench extra}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
LOGS="$OUT/logs"
PY=${PYTHON:-python3}
if ! $PY -c "import nbval" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  # all but flash-linear-attention: with it installed, transformers would route Qwen3.5 through its
  # kernels; the DeltaNet benchmark (scripts/gpu_extras.sh delta_rule) installs it for its own run only
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v '/fla_core-')
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TRITONLLM_KERNELS=solutions PYTHONUNBUFFERED=1
JOBS=${JOBS:-4}
PAR=""   # tests spread one by one over the workers; a notebook's cells together, in order (notebooks/conftest.py)
$PY -c "import xdist" 2>/dev/null && [ "$JOBS" -gt 1 ] && PAR="-n $JOBS --dist load"
TMO=""   # per-test limit, where pytest-timeout is installed: a hung kernel fails one test, not the run
$PY -c "import pytest_timeout" 2>/dev/null && TMO="--timeout=300"
PYTEST="$PY -m pytest -q -p no:cacheprovider -o addopts= -p tritonllm_course.pytest_faillog"
want() { [[ " $STEPS " == *" $1 "* ]]; }
SUMMARY="$OUT/summary.md"

step() {  # step NAME LOG CMD...: run, record time and exit status
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  echo "| $name | $([ $rc -eq 0 ] && echo pass || echo "FAIL ($rc)") | $((SECONDS - t0)) s | $(tail -n 1 "$log" | tr '|' '/') |" >>"$SUMMARY"
  return $rc
}

{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  $PY -c "import tritonllm_course; tritonllm_course.setup()"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo
  echo "| step | result | time | last line |"
  echo "|---|---|---|---|"
} >"$SUMMARY" 2>&1

status=0
# correctness: the tests (all but those asserting a timing, marker `timing`) and the notebooks, side by side
pids=()
if want tests; then
  TRITONLLM_FAILLOG="$LOGS/failures-tests.log" step "tests (GPU mode, real shapes)" "$LOGS/tests.log" \
    $PYTEST tests -m "not timing" $TMO --durations=15 $PAR ${PYTEST_ARGS:-} &
  pids+=($!)
fi
if want notebooks; then
  TRITONLLM_FAILLOG="$LOGS/failures-notebooks.log" step "notebooks (nbval)" "$LOGS/notebooks.log" \
    $PYTEST notebooks --durations=30 --nbval-lax --nbval-cell-timeout=900 $PAR &
  pids+=($!)
fi
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
# timings, one at a time: nothing else on the GPU while they run
want timing && { TRITONLLM_FAILLOG="$LOGS/failures-timing.log" step "timing tests" "$LOGS/timing.log" \
  $PYTEST tests -m "timing" $TMO || status=1; }
want bench && { step "kernel benchmarks" "$LOGS/bench.log" \
  $PY -m tritonllm_course.measure.kernel_table --out "$OUT/results" || status=1; }
if want extra; then
  for name in $(bash scripts/gpu_extras.sh --list); do   # chapters and lab/ add their GPU runs to its table
    [ -n "${EXTRAS:-}" ] && [[ " $EXTRAS " != *" $name "* ]] && continue
    step "gpu_extra_$name" "$LOGS/extra_$name.log" timeout "${EXTRA_TIMEOUT:-0}" bash scripts/gpu_extras.sh \
      "$name" "$OUT/results" || status=1
  done
fi
(cd "$OUT" && { [ -d results ] && tar czf results.tgz results && rm -rf results; } ; tar czf logs.tgz logs && rm -rf logs)
cat "$SUMMARY"
exit $status
