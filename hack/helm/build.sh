#!/usr/bin/env bash
# Build helm (helm.sh/helm/v4/cmd/helm) from the Go module proxy into the
# cache, for the chart's lint and render tests (charts/sandprobe,
# charts/chart_test.go) and make e2e's install lifecycle. Like kwok
# (hack/kwok/build.sh): built once, stamped with its version and the Go
# that built it, then reused.
#
#   hack/helm/build.sh              build if missing (stamped; minutes cold, instant warm)
#   hack/helm/build.sh --print-bin  path of the helm binary (no build)
#
# Output: ${SANDPROBE_CACHE:-/var/cache/sandprobe}/helm/<version>/bin/helm
set -euo pipefail

HELM_VERSION=v4.3.2
HELM_MODULE=helm.sh/helm/v4
# shellcheck source=hack/lib/gotool.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"
gotool helm "$HELM_VERSION" "$HELM_MODULE/cmd/helm" "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" "$@"
