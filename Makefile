# sandprobe — see README.md. Most targets need root (namespaces, nftables).
GO        ?= go
BIN       := bin/sandprobe
# The in-sandbox probe alone (cmd/sandprobe-probe): what the backends copy
# into every sandbox, beside $(BIN) in bin/ and in the image.
PROBE_BIN := bin/sandprobe-probe
# What every binary says it is (sandprobe version, the reports, sandprobe_info):
# the tag (make release VERSION=vX.Y.Z), the commit and the commit's time,
# stamped with -X into internal/version. The build date is the commit's
# (SOURCE_DATE_EPOCH), never the clock, and -trimpath and an empty build ID
# leave nothing else that varies: one commit, one set of bytes.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/sandprobe/sandprobe/internal/version
LDFLAGS   := -s -w -buildid= -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).date=$(BUILD_DATE)
export VERSION COMMIT SOURCE_DATE_EPOCH
# Fuzz budgets are execution counts, not durations: with a -fuzztime
# duration, Go 1.26's fuzz coordinator can report its own deadline as a
# failure on a loaded machine (golang/go#75804, fixed in Go 1.27). Each is
# about 10 s here; FUZZTIME=10m (or 500000x) overrides them all.
FUZZTIME  ?=
FUZZ_LOAD     ?= 30000x
FUZZ_HOSTRULE ?= 60000x
FUZZ_RENDERED ?= 2000x
FUZZ_BLOCKYAML ?= 15000x
FUZZ_DECODENODE ?= 10000x
FUZZ_DOCSTREAM ?= 15000x
FUZZ_JUDGED ?= 15000x
FUZZ_STRINGKEYS ?= 30000x
FUZZ_SCAN ?= 30000x
export CGO_ENABLED := 0
export SANDPROBE_CACHE ?= /var/cache/sandprobe
# What make test and make demo leave running when they end: nothing, unless
# named here ("docker lab", "cluster", "all"; spaces or commas). make down
# stops the rest and hack/leftovers.sh fails the run if anything else is left.
export SANDPROBE_KEEP ?=

.PHONY: all build image release deps docker-env kube-env kwok-env helm-env lint-env test unit rules fuzz fuzz-long e2e demo down leftovers bench lint verify docs fixtures clean

all: build

build:
	$(GO) build -trimpath -ldflags='$(LDFLAGS)' -o $(BIN) ./cmd/sandprobe
	$(GO) build -trimpath -ldflags='$(LDFLAGS)' -o $(PROBE_BIN) ./cmd/sandprobe-probe

# sandprobe's OCI image, built in code (hack/image.sh: no Docker daemon):
# both binaries for linux/amd64 and linux/arm64 (PLATFORMS=…) under one
# index, non-root, with CA certificates; reproducible (one commit, one
# digest). Writes out/image/oci (an OCI layout), out/image/image.tar (for
# ctr images import and docker load) and prints the digest.
image:
	GO='$(GO)' hack/image.sh

# A release into out/release/$(VERSION) (hack/release.sh): the CLI for
# linux and darwin (amd64, arm64), the probe binary, a CycloneDX SBOM of each binary's Go
# modules, the image (make image) with its digest, the Helm chart pinned to
# it (helm from hack/helm/build.sh), and sha256sums.txt.
# VERSION must be a tag-shaped vX.Y.Z: make release VERSION=v0.1.0.
release:
	GO='$(GO)' hack/release.sh

# Installs what the tests and the demo need (Debian packages); idempotent.
deps:
	hack/install-deps.sh

# The private Docker engine (runc + gVisor) and the Debian + Chromium test
# images with their sabotaged variants; seconds when cached (hack/docker/README.md).
docker-env: deps
	hack/images/all.sh

# kube-apiserver, etcd, kubelet, … built from the Kubernetes module into
# $(SANDPROBE_CACHE)/k8s (≈15–30 min cold on 2 cores, under a second when cached).
kube-env:
	hack/k8s/build.sh

# kwok's controller, built from its module into $(SANDPROBE_CACHE)/kwok
# (a few minutes cold, instant warm): the fake kubelets of the simulated
# thousand-node fleet (runner/kube's kwok test and bench, docs/fleet.md).
kwok-env:
	hack/kwok/build.sh

# helm, built from its module into $(SANDPROBE_CACHE)/helm (minutes cold,
# instant warm): the chart's lint and its render-vs-kustomize test
# (charts/chart_test.go), make e2e's install lifecycle.
helm-env:
	hack/helm/build.sh

# The whole suite against real parts (hack/test.sh). SANDPROBE_REQUIRE_ENV=1
# turns a test that would skip for a missing environment (root, lab,
# Docker, apiserver) into a failure. It builds the environments (docker-env,
# kube-env, kwok-env, helm-env) at once first, then the suite with make lint
# and the fuzzers beside it, then the end-to-end
# story on a real cluster (make e2e), on kube-router, then on Cilium
# (make e2e CNI=cilium; its cold build overlaps the suite). Whatever the
# outcome, it ends with make down and the leftovers check: nothing it
# started outlives it (SANDPROBE_KEEP aside).
test: deps build
	GO='$(GO)' BIN='$(BIN)' hack/test.sh

# The headline story on a real single-node cluster (hack/cluster) and the
# network lab: kubectl apply -k, a Job from the CronJob green, one egress
# rule flushed, the next Job exit 1, the admission policy refusing an
# unisolated sandbox; everything torn down after (hack/e2e.sh).
# make e2e CNI=cilium: Cilium is the CNI and enforces the rendered
# CiliumNetworkPolicy (hack/cluster/cilium.sh builds it: tens of minutes cold).
e2e: deps build kube-env
	hack/e2e.sh

# The pure packages: their tests need no root, no network lab, no Docker
# engine and no API server (tests in them that want one skip without it;
# SANDPROBE_UNIT=1 makes the one that would bring up the lab skip too),
# so this is the quick loop while editing. The backends (runner/local,
# docker, kube), the CLI, the chart and hack/ are make test's.
UNIT_PKGS := ./policy/... ./probes ./result ./drift ./render ./admission ./page ./report ./runner ./audit ./cache ./egresslog ./manifests ./internal/manifest ./internal/fields ./internal/version ./internal/sbom ./internal/image ./internal/layering
unit:
	SANDPROBE_UNIT=1 $(GO) test -count=1 $(UNIT_PKGS)

# The alert rules: promtool's syntax check and unit tests (go test ./manifests
# runs the same, plus the PrometheusRule/runbook/metric-name consistency).
rules:
	promtool check rules manifests/alerts/sandprobe.rules.yml
	promtool test rules manifests/alerts/*_test.yml
	$(GO) test -count=1 ./manifests/...

fuzz:
	$(GO) test ./policy -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_LOAD))
	$(GO) test ./policy -run '^$$' -fuzz '^FuzzHostRule$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_HOSTRULE))
	$(GO) test ./render -run '^$$' -fuzz '^FuzzRenderedHostRules$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_RENDERED))
	$(GO) test ./internal/manifest -run '^$$' -fuzz '^FuzzBlockYAML$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_BLOCKYAML))
	$(GO) test ./internal/manifest -run '^$$' -fuzz '^FuzzDecodeNode$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_DECODENODE))
	$(GO) test ./internal/manifest -run '^$$' -fuzz '^FuzzDocStream$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_DOCSTREAM))
	$(GO) test ./internal/manifest -run '^$$' -fuzz '^FuzzStringKeysOnly$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_STRINGKEYS))
	$(GO) test ./drift -run '^$$' -fuzz '^FuzzJudged$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_JUDGED))
	$(GO) test ./egresslog -run '^$$' -fuzz '^FuzzScan$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_SCAN))

# The differential fuzzers (the manifest reader against apimachinery's, drift's
# verdicts against the reference reading's), each for
# at least FUZZ_MINUTES (10) minutes: about 30 minutes, so make bench's, not
# make test's.
fuzz-long:
	hack/fuzz-long.sh

# Ends with hack/leftovers.sh lab: nothing of the lab outlives it.
demo: deps build
	hack/demo.sh

# Stops the cluster, the lab and the Docker engine (each under its test
# lock), except what SANDPROBE_KEEP names; caches and images stay.
down:
	hack/down.sh

# Lists what the test environments left running; exit 1 if anything not kept.
leftovers:
	hack/leftovers.sh

bench: deps build docker-env kube-env kwok-env
	hack/bench.sh

# gofmt, go vet, golangci-lint (.golangci.yml) and shellcheck over hack/
# (hack/lint.sh); golangci-lint is built once into $(SANDPROBE_CACHE)
# (make lint-env: about two minutes cold, instant warm).
lint:
	GO='$(GO)' hack/lint.sh

lint-env:
	hack/golangci-lint/build.sh

# Regenerates docs/checks.md, the drift rules table and fixtures/drift and
# fails if that changed a file: what is checked in is what the code makes
# (hack/verify.sh).
verify:
	GO='$(GO)' hack/verify.sh

docs: build
	$(BIN) checks -o markdown > docs/checks.md
	$(GO) test ./drift -run '^TestDocsRules$$' -update

# Regenerates fixtures/drift from the case tables in drift/cases_test.go; the
# docker inspect files need the test Docker engine (hack/docker/up.sh).
fixtures:
	$(GO) test ./drift -run '^(TestFixtures|TestDockerLive)$$' -update -count=1

clean:
	rm -rf bin out
