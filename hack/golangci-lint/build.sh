#!/usr/bin/env bash
# Build golangci-lint (github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
# from the Go module proxy into the cache, for make lint (.golangci.yml).
# Like kwok and helm (hack/lib/gotool.sh): built once with the Go that
# builds sandprobe (a linter built by an older Go cannot load this module's
# packages), stamped with its version and that Go, then reused.
#
#   hack/golangci-lint/build.sh              build if missing (stamped; minutes cold, instant warm)
#   hack/golangci-lint/build.sh --print-bin  path of the golangci-lint binary (no build)
#
# Output: ${SANDPROBE_CACHE:-/var/cache/sandprobe}/golangci-lint/<version>/bin/golangci-lint
set -euo pipefail

GOLANGCI_LINT_VERSION=v2.15.0
GOLANGCI_LINT_MODULE=github.com/golangci/golangci-lint/v2
# shellcheck source=hack/lib/gotool.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"
gotool golangci-lint "$GOLANGCI_LINT_VERSION" "$GOLANGCI_LINT_MODULE/cmd/golangci-lint" \
  "-s -w -X main.version=${GOLANGCI_LINT_VERSION#v}" "$@"
