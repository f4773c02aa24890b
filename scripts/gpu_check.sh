#!/usr/bin/env bash
# On a GPU machine, in one call: the test suite at real shapes (GPU mode), every notebook under nbval,
# and the kernel benchmarks. Writes a summary, the logs and the results into DIR.
#   scripts/gpu_check.sh DIR            (PYTHON=... to choose the interpreter; default python3)
# Works from a plain checkout: the course is put on PYTHONPATH, nothing is installed.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TRITONLLM_KERNELS=solutions PYTHONUNBUFFERED=1
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
step "tests (GPU mode, real shapes)" "$OUT/tests.log" \
  $PY -m pytest tests -q -p no:cacheprovider -o addopts="" ${PYTEST_ARGS:-} || status=1
step "notebooks (nbval)" "$OUT/notebooks.log" \
  $PY -m pytest notebooks -q -p no:cacheprovider -o addopts="" --nbval-lax --nbval-cell-timeout=900 || status=1
step "kernel benchmarks" "$OUT/bench.log" \
  $PY -m tritonllm_course.kernel_table --out "$OUT/results" || status=1
for extra in scripts/gpu_extra_*.sh; do   # later chapters add their own GPU runs here
  [ -e "$extra" ] && { step "$(basename "$extra")" "$OUT/$(basename "$extra" .sh).log" bash "$extra" "$OUT/results" || status=1; }
done
(cd "$OUT" && tar czf results.tgz results 2>/dev/null && rm -rf results)
cat "$SUMMARY"
exit $status
