#!/usr/bin/env bash
# make bench: every benchmark prints its subject against a baseline measured
# in the same run, and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0

echo "== probe: non-network checks in a local sandbox (goal: checks ≤ 50 ms) =="
go test ./runner/local -run '^$' -bench BenchmarkLocalProbe -benchtime 30x | grep -E '^Benchmark' || exit 1

echo
echo "== browser: browser.screenshot vs bare 'chromium --headless --screenshot' of the same page (goal: ratio ≤ 1.2) =="
go test ./probes -run '^$' -bench BenchmarkBrowserScreenshot -benchtime 5x | grep -E '^Benchmark' || exit 1

echo
echo "== verify-image: Debian + Chromium image, runc vs gVisor, vs /bin/true in the same constrained container =="
go test ./runner/docker -run '^$' -bench BenchmarkVerifyImage -benchtime 3x | grep -E '^Benchmark' || exit 1
echo "== metrics: Observe + exposition for 500 nodes × 24 findings, against the JSON report of the same run =="
go test ./report -run '^$' -bench BenchmarkMetricsObserveAndWrite -benchtime 20x | grep -E '^Benchmark' || exit 1

echo
echo "== drift: the offline rule engine over 10,000 pods + 2,000 Deployment templates under 500 NetworkPolicies, 50 AdminNetworkPolicies and 500 Cilium policies (goal ≥ 100,000 pods/s), against protobuf decoding of the same pods =="
go test ./drift -run '^$' -bench '^(BenchmarkEngine|BenchmarkDecodeProtobuf)$' -benchtime 5x | grep -E '^Benchmark' || exit 1

echo
echo "== drift: 10,000 pods + 2,000 Deployments + 500 NetworkPolicies + 50 AdminNetworkPolicies + 500 CiliumNetworkPolicies in a real kube-apiserver (goals: ≤ 5 s, ≤ 150 MB peak RSS) =="
# kube-apiserver and etcd come from \$KUBEBUILDER_ASSETS or hack/k8s/build.sh's cache.
SANDPROBE_BENCH=1 SANDPROBE_BIN="$PWD/bin/sandprobe" \
	go test ./drift -run '^TestBenchDriftLive$' -count=1 -timeout 20m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1

echo
echo "== drift at fleet size: 100,000 pods + 10,000 Deployments + 5,000 NetworkPolicies (+ 50 ANPs, 500 CNPs) in a real kube-apiserver, vs client-go's bare paged List of the same objects (goals: ≤ 30 s, ≤ 300 MB; ~15 min, most of it storing the objects) =="
SANDPROBE_BENCH=1 SANDPROBE_BENCH_FLEET=1 SANDPROBE_BIN="$PWD/bin/sandprobe" \
	go test ./drift -run '^TestBenchDriftLive$' -count=1 -timeout 40m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1

echo
echo "== drift -f: 10,000 and 100,000 generated pods in one multi-document file, every output format (text, json, junit, sarif), vs kube-score v1.20.0 'score -o ci' on the same file (goals: ≥ 10x faster, 100k ≤ 11 x 10k, peak RSS ≤ 150 MB) =="
# kube-score is built once from its module into the cache (hack/kube-score.sh).
SANDPROBE_BENCH=1 SANDPROBE_BIN="$PWD/bin/sandprobe" SANDPROBE_KUBE_SCORE="$(hack/kube-score.sh)" \
	go test ./drift -run '^TestBenchDriftFiles$' -count=1 -timeout 60m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1

echo
echo "== manifest reading: 10,000 generated pods (genpods: yaml.Marshal's block style; handpods: comments, flow collections, block scalars, Lists, long env lists) read into objects on one core, the block-YAML reader first (as built) vs sigs.k8s.io/yaml alone (-tags sandprobe_referenceyaml) =="
go test ./drift -run '^$' -bench '^BenchmarkReadManifests$' -benchtime 3x | grep -E '^Benchmark' || exit 1
go test -tags sandprobe_referenceyaml ./drift -run '^$' -bench '^BenchmarkReadManifests$' -benchtime 3x | grep -E '^Benchmark' || exit 1

echo
echo "== manifest reader, whole drift -f -o json: 10,000 and 100,000 pods of both shapes, the shipped build vs the reference-reader build vs kube-score v1.20.0 (at 10,000) (goal: the block-YAML reader stays only while it is ≥ 1.5x faster end to end; drift ≥ 10x kube-score on every shape) =="
SANDPROBE_BENCH=1 SANDPROBE_KUBE_SCORE="$(hack/kube-score.sh)" \
	go test ./drift -run '^TestBenchManifestReader$' -count=1 -timeout 90m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1

echo
echo "== egress-usage: 100,000 and 1,000,000 generated Squid access.log lines (200 sandboxes, a long tail of hosts, bursts), sandprobe egress-usage -o json vs grep -c counting the same file twice (goals: ≤ 0.5 × grep's two counts at 1,000,000 lines; peak RSS flat, ≤ 1.5 × from 100,000 to 1,000,000 lines and ≤ 64 MB) =="
SANDPROBE_BENCH=1 SANDPROBE_BIN="$PWD/bin/sandprobe" \
	go test ./audit -run '^TestBenchEgressUsage$' -count=1 -timeout 20m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1

echo
echo "== cache verify: a generated npm cache of 100,000 entries (200,000 files), every content file and index line re-hashed against its key, and the same against its seal, vs reading every file once with cat (goals: ≤ 2.5x cat; peak RSS ≤ 64 MB and flat: 100,000 entries ≤ 1.5x the 10,000-entry run) =="
SANDPROBE_BENCH=1 SANDPROBE_BIN="$PWD/bin/sandprobe" \
	go test ./cache -run '^TestBenchCacheVerify$' -count=1 -timeout 30m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1

echo
echo "== binary sizes (static, stripped; goals: sandprobe-probe ≤ 12 MB, what every sandbox receives; sandprobe ≤ 35 MB, the runner, no longer copied into sandboxes), the probe against the full binary it was split from =="
# MB here is 2^20 bytes, as before. sandprobe-probe is what every sandbox
# receives (docs/probe.md); an empty static Go program is the floor.
floor_dir=$(mktemp -d)
printf 'module floor\ngo 1.26\n' >"$floor_dir/go.mod"
printf 'package main\n\nfunc main() {}\n' >"$floor_dir/main.go"
go build -C "$floor_dir" -trimpath -ldflags='-s -w' -o "$floor_dir/floor" .
floor=$(stat -c %s "$floor_dir/floor")
rm -rf "$floor_dir"
full=$(stat -c %s bin/sandprobe)
probe=$(stat -c %s bin/sandprobe-probe)
awk -v f="$full" -v p="$probe" -v z="$floor" 'BEGIN {
	mb = 1048576
	printf "bin/sandprobe:        %5.1f MB  (goal ≤ 35 MB: %s)\n", f / mb, (f <= 35 * mb ? "ok" : "OVER")
	printf "bin/sandprobe-probe:  %5.1f MB  (goal ≤ 12 MB: %s)  = %.2f × bin/sandprobe\n", p / mb, (p <= 12 * mb ? "ok" : "OVER"), p / f
	printf "empty Go program:     %5.1f MB  (the floor)\n", z / mb
}'

echo
echo "== egress: 24 DROP targets + 4 allowed hosts + the metadata set (8, dropped), directly and through the proxy, T = 1s, at concurrency 4 and the default =="
echo "   goals: every attempt dialled; egress wall ≤ 1.3 × the probe's own bound ceil(attempts/concurrency) × T;"
echo "          ≥ 15x faster than a sequential curl loop over the same attempts at the default (at concurrency 4 the ceiling is ~4x)"
go test ./runner/local -run '^$' -bench BenchmarkEgressVsCurl -benchtime 1x -timeout 20m | grep -E '^Benchmark' || exit 1

echo
echo "== kube cycle: the runner's overhead beyond pod start-up + one egress timeout on the real cluster, parity survey and control pod included, vs the same runner without its control pod and a bare client-go create→watch→delete of the same pod running 'probe --only identity' (goal: overhead ≤ 2 s) =="
go test ./runner/kube -run '^$' -bench BenchmarkKubeCycle -benchtime 3x -timeout 20m | grep -E '^(Benchmark|kube cycle)' || exit 1

echo
echo "== regression → failing run: an allow-all NetworkPolicy under kube-router, sandprobe serve every 15 s on the real cluster, vs a green run of the same serve (goal: the first run after the regression fails, within one cycle) =="
go test ./runner/kube -run '^$' -bench BenchmarkRegressionToFailingRun -benchtime 3x -timeout 20m | grep -E '^(Benchmark|regression)' || exit 1

echo
echo "== time to detect: 'sandprobe serve --watch' (schedule @every 1h) on the real cluster under the kube-router DaemonSet, real Prometheus (the shipped rules) and Alertmanager; a NetworkPolicy reopen and a broken CNI-agent rollout, 3 trials each, vs a green cycle and the 30-minute CronJob's schedule =="
echo "   goals: reopen ≤ 30 s to sandprobe_egress_unexpected_open > 0 and ≤ 60 s to SandboxEgressReopened at Alertmanager; agent rollout ≤ 60 s to the metric"
SANDPROBE_BENCH=1 SANDPROBE_BIN="$PWD/bin/sandprobe" \
	go test ./runner/kube -run '^TestBenchTimeToDetect$' -count=1 -timeout 30m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1

echo
echo "== egress page: a 10-node run (10 egress findings each) + drift on 200 objects, with 24 runs of history, vs the JSON report of the same run (goal: ≤ 250 ms a render; it is rendered per request) =="
go test ./page -run '^$' -bench BenchmarkPage -benchtime 20x | grep -E '^Benchmark' || exit 1

echo
echo "== kube fleet (SIMULATED, kwok): one 'sandprobe run --per-node' over 1,000 fake nodes on a real kube-apiserver + etcd + kube-scheduler, vs a bare client-go fan-out of the same pods at the same cap =="
echo "   goals: wall ≤ 2 × (pod start + one egress timeout + the cap's queueing); API requests per node by the audit log (watch, not poll); ≤ 200 MB peak RSS; 0 pods left"
SANDPROBE_BENCH=1 SANDPROBE_BIN="$PWD/bin/sandprobe" \
	go test ./runner/kube -run '^TestBenchKwokFleetSimulated$' -count=1 -timeout 30m -v |
	grep -vE '^(=== RUN|--- PASS|PASS$|ok )' || exit 1
