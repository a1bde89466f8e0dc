#!/usr/bin/env bash
# Build kwok's controller (sigs.k8s.io/kwok/cmd/kwok) from the Go module proxy
# into the cache, for the simulated thousand-node cycle (runner/kube's kwok
# test and bench, docs/fleet.md). kwok 0.8.0 is built against client-go
# 0.36 and drives nodes and pods through the core/v1 API only, which the
# project's v1.37 kube-apiserver serves unchanged (one minor of skew).
#
#   hack/kwok/build.sh              build if missing (stamped; ~3-5 min cold, instant warm)
#   hack/kwok/build.sh --print-bin  path of the kwok binary (no build)
#
# Output: ${SANDPROBE_CACHE:-/var/cache/sandprobe}/kwok/<version>/bin/kwok
set -euo pipefail

KWOK_VERSION=v0.8.0
KWOK_MODULE=sigs.k8s.io/kwok
# shellcheck source=hack/lib/gotool.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"
gotool kwok "$KWOK_VERSION" "$KWOK_MODULE/cmd/kwok" "-s -w" "$@"
