#!/usr/bin/env bash
# On a GPU machine, in one call: the test suite at real shapes (GPU mode), every notebook under nbval,
# and the kernel benchmarks. Writes a summary, the logs and the results into DIR.
#   scripts/gpu_check.sh DIR [STEP...]   STEP: tests timing notebooks bench extra (default: all five)
#   PYTHON=... chooses the interpreter (default python3); JOBS=N parallel pytest workers (default 4)
# Works from a plain checkout: the course is put on PYTHONPATH, nothing is installed into the system.
# Wheels in .whl/ (scripts/fetch_gpu_wheels.sh) are installed into /tmp/site first when nbval is missing.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR [tests|notebooks|bench|extra]...}
shift
STEPS=${*:-tests timing notebooks bench extra}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
if ! $PY -c "import nbval" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  # all but flash-linear-attention: with it installed, transformers would route Qwen3.5 through its
  # kernels; the DeltaNet benchmark (scripts/gpu_extra_delta_rule.sh) installs it for its own run only
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v '/fla_core-')
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TRITONLLM_KERNELS=solutions PYTHONUNBUFFERED=1
JOBS=${JOBS:-4}
PAR=""   # one notebook (or test file) per worker, all its cells in order
$PY -c "import xdist" 2>/dev/null && [ "$JOBS" -gt 1 ] && PAR="-n $JOBS --dist loadfile"
TMO=""   # per-test limit, where pytest-timeout is installed: a hung kernel fails one test, not the run
$PY -c "import pytest_timeout" 2>/dev/null && TMO="--timeout=300"
# failures are written to failures-*.log as they happen (the run may be stopped at a time limit)
PLUG="-p tritonllm_course.pytest_faillog"
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
# correctness tests and notebooks in parallel (one file per worker, its tests/cells in order); the tests
# that assert a timing (marker `timing`) run alone, like the benchmarks: a shared GPU would disturb them
want tests && { TRITONLLM_FAILLOG="$OUT/failures-tests.log" step "tests (GPU mode, real shapes)" "$OUT/tests.log" \
  $PY -m pytest tests -q -p no:cacheprovider -o addopts="" -m "not timing" $TMO $PLUG --durations=15 $PAR \
  ${PYTEST_ARGS:-} || status=1; }
want notebooks && { TRITONLLM_FAILLOG="$OUT/failures-notebooks.log" step "notebooks (nbval)" "$OUT/notebooks.log" \
  $PY -m pytest notebooks -q -p no:cacheprovider -o addopts="" $PLUG --durations=30 --nbval-lax --nbval-cell-timeout=900 $PAR || status=1; }
# timings last and one at a time: nothing else on the GPU while they run
want timing && { step "timing tests" "$OUT/timing.log" \
  $PY -m pytest tests -q -p no:cacheprovider -o addopts="" -m "timing" $TMO || status=1; }
want bench && { step "kernel benchmarks" "$OUT/bench.log" \
  $PY -m tritonllm_course.kernel_table --out "$OUT/results" || status=1; }
if want extra; then
  for extra in scripts/gpu_extra_*.sh; do   # chapters add their own GPU runs here
    [ -e "$extra" ] && { step "$(basename "$extra")" "$OUT/$(basename "$extra" .sh).log" bash "$extra" "$OUT/results" || status=1; }
  done
fi
(cd "$OUT" && tar czf results.tgz results 2>/dev/null && rm -rf results)
cat "$SUMMARY"
exit $status
