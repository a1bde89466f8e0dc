#!/usr/bin/env bash
# make fuzz-long: each differential fuzzer (internal/manifest's fast reader
# against apimachinery's YAML reading into the typed API objects, and drift's
# verdicts against the reference reading's) runs for at least
# FUZZ_MINUTES (default 10) minutes; prints per target the wall time, the
# executions and the differences found (a difference fails the run, with
# the input saved under testdata/fuzz as Go does).
#
# The time is reached by consecutive execution-count runs, not one
# -fuzztime duration: Go 1.26's coordinator can report its own deadline as
# a failure on a loaded machine (golang/go#75804, see the Makefile). The
# runs share Go's fuzz cache, so each continues from the corpus the last
# one grew. FUZZ_PARALLEL (default 1) workers: a core stays free.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
minutes=${FUZZ_MINUTES:-10}
parallel=${FUZZ_PARALLEL:-1}
chunk=${FUZZ_CHUNK:-2000000}
targets=${FUZZ_TARGETS:-FuzzBlockYAML FuzzDecodeNode FuzzDocStream FuzzStringKeysOnly FuzzJudged}
case "$minutes$parallel$chunk" in *[!0-9]*|'')
  echo "fuzz-long: FUZZ_MINUTES, FUZZ_PARALLEL and FUZZ_CHUNK are whole numbers" >&2; exit 2 ;;
esac
go test -c -o /dev/null ./internal/manifest # compile errors fail here, once
go test -c -o /dev/null ./drift

for target in $targets; do
  pkg=./internal/manifest
  [[ $target == FuzzJudged ]] && pkg=./drift
  start=$SECONDS execs=0 runs=0
  while (( SECONDS - start < minutes * 60 )); do
    out="$(go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "${chunk}x" -parallel "$parallel" 2>&1)" || {
      printf '%s\n' "$out" | tail -40
      echo "fuzz-long: $target found a difference after $((SECONDS - start)) s (input saved under ${pkg#./}/testdata/fuzz/$target)" >&2
      exit 1
    }
    # "fuzz: elapsed: 12s, execs: 200000 (16528/sec), new interesting: ..."
    n="$(printf '%s\n' "$out" | sed -n 's/.*execs: \([0-9]*\) .*/\1/p' | tail -1)"
    execs=$(( execs + ${n:-0} )) runs=$(( runs + 1 ))
  done
  printf '%-16s %5d s  %9d execs in %d runs  0 differences\n' "$target" $((SECONDS - start)) "$execs" "$runs"
done
