#!/usr/bin/env bash
# make bench: every benchmark prints its subject against a baseline measured
# in the same run, and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0

echo "== probe: non-network checks in a local sandbox (goal: checks ≤ 50 ms) =="
go test ./runner/local -run '^$' -bench BenchmarkLocalProbe -benchtime 30x | grep -E '^Benchmark' || exit 1

echo
echo "== metrics: Observe + exposition for 500 nodes × 24 findings, against the JSON report of the same run =="
go test ./report -run '^$' -bench BenchmarkMetricsObserveAndWrite -benchtime 20x | grep -E '^Benchmark' || exit 1

echo
echo "== binary size (goal ≤ 30 MB) =="
size=$(stat -c %s bin/sandprobe)
awk -v s="$size" 'BEGIN { printf "bin/sandprobe (static, stripped): %.1f MB\n", s / 1048576 }'
