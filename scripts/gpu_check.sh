#!/usr/bin/env bash
# The course's GPU verification, in parts that each fit one call of a lent GPU (scripts/gpu_parts.py).
#   scripts/gpu_check.sh quick DIR     5 minutes or less: the first GPU run after any change to a kernel
#   scripts/gpu_check.sh PART DIR      one part of the full suite, 8 minutes or less: kernels planted model
#                                      chapters timing (scripts/gpu_parts.py --list says what each holds)
#   scripts/gpu_check.sh full DIR      every part in turn (longer than one 10-minute call)
#   scripts/gpu_check.sh P1,P2 DIR     several parts in turn within one call (BUDGET_S=seconds of it, default 570):
#                                      a part runs where what is left fits it (gpu_parts.py fit), under what is left
#   scripts/gpu_check.sh bench DIR     the kernel table (tritonllm_course.measure.kernel_table; BUDGET_S=seconds
#                                      stops it between rows, RESUME=an earlier table's JSON goes on from it)
#   scripts/gpu_check.sh extra DIR     the chapters' and lab's GPU runs (scripts/gpu_extras.sh; EXTRAS="engine
#                                      profile" picks some, EXTRA_TIMEOUT=seconds bounds each)
# DIR receives summary.md, logs.tgz (each part's log, failures-<part>.log written as failures happen, and
# durations-<part>.tsv, every test's outcome and seconds), for bench and extra results.tgz (the files they
# wrote) and, for a part, record_<part>.json: commit, date, GPU, versions, counts, and results.tgz holding
# measured/<name>.json, the numbers of the tests that measure something (tests/helpers.py record_measured).
# Copy a record that passed to results/gpu_check/ (the README's line reads them). DIR must be new or empty: the
# run packs its results/ and logs/ into the archives and removes them, so a DIR holding anything else (a checkout,
# its results/, an earlier run's files) is refused before any work rather than packed, removed or overwritten.
# Environment: COMMIT=<sha> names the commit in the record (a device copy has no .git); TRITONLLM_DTYPE=float16
# runs the part in a T4's dtype (its record gets the suffix _float16); JOBS=N overrides the part's workers;
# LIMIT_S=seconds its time limit (to fit what is left of a lent GPU's time); PYTHON=... the interpreter.
# Works from a plain checkout: the course is put on PYTHONPATH, nothing is installed into the system.
# Wheels in .whl/ (scripts/fetch_gpu_wheels.sh) are installed into /tmp/site first when nbval is missing.
set -uo pipefail
WHAT=${1:-}
OUT=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
PARTS=$(cd "$ROOT" && $PY scripts/gpu_parts.py --list | cut -d' ' -f1 | tr '\n' ' ')
usage="usage: scripts/gpu_check.sh {${PARTS// /|}full|bench|extra|PART,PART...} OUTDIR"
if [ -z "$WHAT" ] || [ -z "$OUT" ]; then echo "$usage" >&2; exit 2; fi
known=" $PARTS "; [[ $WHAT == *,* ]] || known+="full bench extra "   # a list (commas) holds parts only
rest=$WHAT,
while [ -n "$rest" ]; do   # each name between commas, an empty one (',' or 'quick,') too: a list that runs nothing
  one=${rest%%,*}; rest=${rest#*,}
  [ -n "$one" ] || { echo "scripts/gpu_check.sh: an empty part name in '$WHAT'; $usage" >&2; exit 2; }
  [[ $one =~ ^[a-z0-9_]+$ && $known == *" $one "* ]] \
    || { echo "scripts/gpu_check.sh: no part named '$one'; $usage" >&2; exit 2; }
done
if [ "$WHAT" = extra ] && [ -n "${EXTRAS:-}" ]; then   # a name it does not know would run nothing and pass
  read -ra picked -d '' <<<"$EXTRAS"   # its words, on any line, never globbed
  names=$(bash "$ROOT/scripts/gpu_extras.sh" --list)
  [ ${#picked[@]} -gt 0 ] || { echo "scripts/gpu_check.sh: EXTRAS names no extra (one of: $names)" >&2; exit 2; }
  for one in "${picked[@]}"; do
    [[ " $names " == *" $one "* ]] \
      || { echo "scripts/gpu_check.sh: EXTRAS: no extra named '$one' (one of: $names)" >&2; exit 2; }
  done
  EXTRAS="${picked[*]}"   # one space between names, as the step below matches them
fi
[[ $OUT == /* ]] || OUT="$PWD/$OUT"   # the caller's folder, not the course's (the steps run from the course's)
if [ -e "$OUT" ] || [ -L "$OUT" ]; then   # new or empty only (the usage above says why)
  if ! [ -d "$OUT" ] || [ -n "$(ls -A "$OUT" 2>/dev/null || echo unreadable)" ]; then
    echo "scripts/gpu_check.sh: OUTDIR $OUT is not a new or empty folder: the run packs and removes its results/" \
      "and logs/ there; name a fresh one" >&2
    exit 2
  fi
fi
for var in LIMIT_S JOBS BUDGET_S EXTRA_TIMEOUT; do   # numbers for timeout, pytest and bash's arithmetic
  val=${!var:-}; least=1; [ "$var" = EXTRA_TIMEOUT ] && least=0   # EXTRA_TIMEOUT=0: no bound
  # no leading zero (bash's arithmetic reads 010 as octal 8, and 08 ends the run with nothing run and exit 0) and
  # at most 9 digits (past 2^63, `[` fails with an error line and lets the value through)
  if [ -n "$val" ] && { ! [[ $val =~ ^(0|[1-9][0-9]{0,8})$ ]] || [ "$val" -lt "$least" ]; }; then
    echo "scripts/gpu_check.sh: $var must be a whole number from $least to 999999999 (no leading zero), got" \
      "'$val'" >&2; exit 2
  fi
done
case ${TRITONLLM_DTYPE:-bfloat16} in bfloat16|float16|float32) ;;
  *) echo "scripts/gpu_check.sh: TRITONLLM_DTYPE must be bfloat16, float16 or float32, got '$TRITONLLM_DTYPE'" >&2
     exit 2 ;;
esac
cd "$ROOT"
mkdir -p "$OUT/logs" || { echo "scripts/gpu_check.sh: cannot create $OUT/logs" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
LOGS="$OUT/logs"
if ! $PY -c "import nbval" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  # all but flash-linear-attention: with it installed, transformers would route Qwen3.5 through its
  # kernels; the DeltaNet benchmark (scripts/gpu_extras.sh delta_rule) installs it for its own run only
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v '/fla_core-')
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TRITONLLM_KERNELS=solutions PYTHONUNBUFFERED=1
# the commit only where this folder is a checkout's top: a copy inside another checkout (a device copy of the tree
# under a folder of the repository) would otherwise name that checkout's HEAD, which is not what runs
if [ -z "${COMMIT:-}" ]; then
  COMMIT=unknown
  [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ] && COMMIT=$(git rev-parse --short=12 HEAD)
fi
export COMMIT
PYTEST="$PY -m pytest -q -p no:cacheprovider -o addopts= -p tritonllm_course.pytest_faillog"
SUMMARY="$OUT/summary.md"
{
  echo "# GPU check: $WHAT, $(date -u +%Y-%m-%dT%H:%MZ), commit $COMMIT"
  echo
  $PY -c "import tritonllm_course; tritonllm_course.setup()"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo
  echo "| step | result | time | last line |"
  echo "|---|---|---|---|"
} >>"$SUMMARY" 2>&1

step() {  # step NAME LOG CMD...: run, record time and exit status
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  local verdict last
  verdict=$([ $rc -eq 0 ] && echo pass || echo "FAIL ($rc)")
  last=$(tail -n 1 "$log" | tr '|' '/')
  echo "| $name | $verdict | $((SECONDS - t0)) s | $last |" >>"$SUMMARY"
  return $rc
}

tag_of() {  # tag_of NAME: a part's record and log name, NAME or NAME_<dtype> outside bf16
  if [ "${TRITONLLM_DTYPE:-bfloat16}" != bfloat16 ]; then echo "${1}_${TRITONLLM_DTYPE}"; else echo "$1"; fi
}

part() {  # part NAME: its pytest run under its time limit, then its record
  local name=$1 tag args workers limit t0 rc
  tag=$(tag_of "$name")
  mapfile -t args < <($PY scripts/gpu_parts.py args "$name")
  workers=${JOBS:-$($PY scripts/gpu_parts.py workers "$name")}
  limit=${LIMIT_S:-$($PY scripts/gpu_parts.py limit "$name")}
  # tests spread one by one over the workers; a chapter's cells together, in order (notebooks/conftest.py)
  local par=()
  $PY -c "import xdist" 2>/dev/null && [ "$workers" -gt 1 ] && par=(-n "$workers" --dist load)
  # each worker's host-side torch gets its share of the cores: 16 workers of 16 threads each on 16 cores spin
  # against one another, and a host-side step that takes a second alone takes tens
  local threads=$(( $(nproc) / workers )); [ "$threads" -lt 1 ] && threads=1
  local tmo=()   # a hung test fails itself where pytest-timeout is installed; the part's limit bounds the rest
  $PY -c "import pytest_timeout" 2>/dev/null && tmo=(--timeout=300)
  : >"$LOGS/durations-$tag.tsv"   # there, even empty, when pytest ran no test: its record then says so
  t0=$SECONDS
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads} TRITONLLM_MEASURED="$OUT/results/measured" \
  TRITONLLM_FAILLOG="$LOGS/failures-$tag.log" TRITONLLM_DURATIONS="$LOGS/durations-$tag.tsv" \
    step "$tag ($workers workers, limit $limit s)" "$LOGS/$tag.log" \
    timeout -k 10 "$limit" $PYTEST "${args[@]}" "${tmo[@]}" "${par[@]}" --durations=20
  rc=$?
  [ $rc -eq 124 ] && echo "| $tag | stopped at its limit of $limit s: see durations-$tag.tsv for what ran |" \
    >>"$SUMMARY"
  $PY scripts/gpu_parts.py record "$name" "$LOGS/durations-$tag.tsv" $rc $((SECONDS - t0)) "$OUT/record_$tag.json" \
    >/dev/null
  return $rc
}

status=0
case $WHAT in
  full) for name in $($PY -c "import sys; sys.path.insert(0, 'scripts'); import gpu_parts; print(*gpu_parts.FULL)"); do
          part "$name" || status=1
        done ;;
  bench) step "kernel benchmarks" "$LOGS/bench.log" \
           $PY -m tritonllm_course.measure.kernel_table --out "$OUT/results" ${BUDGET_S:+--budget-s "$BUDGET_S"} \
           ${RESUME:+--resume "$RESUME"} || status=1 ;;
  extra) for name in $(bash scripts/gpu_extras.sh --list); do   # chapters and lab/ add their runs to its table
           [ -n "${EXTRAS:-}" ] && [[ " $EXTRAS " != *" $name "* ]] && continue
           step "gpu_extra_$name" "$LOGS/extra_$name.log" timeout "${EXTRA_TIMEOUT:-0}" bash scripts/gpu_extras.sh \
             "$name" "$OUT/results" || status=1
         done ;;
  *,*) t_start=$SECONDS
       for name in ${WHAT//,/ }; do
         left=$(( ${BUDGET_S:-570} - (SECONDS - t_start) ))
         if lim=$($PY scripts/gpu_parts.py fit "$name" "$left" "$(tag_of "$name")"); then
           LIMIT_S=$lim part "$name" || status=1
         else
           echo "| $(tag_of "$name") | skipped: $lim |" >>"$SUMMARY"
         fi
       done ;;
  *) part "$WHAT" || status=1 ;;
esac
(cd "$OUT" && { [ -d results ] && tar czf results.tgz results && rm -rf results; }
 tar czf logs.tgz logs && rm -rf logs)
cat "$SUMMARY"
exit $status
