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
CACHE="${SANDPROBE_CACHE:-/var/cache/sandprobe}"
HELM_DIR="$CACHE/helm/$HELM_VERSION"
HELM_BIN="$HELM_DIR/bin/helm"
HELM_STAMP="$HELM_DIR/bin/.stamp"

log() { printf '[helm %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
stamp_key() { printf '%s %s\n' "$HELM_VERSION" "$(go env GOVERSION)"; }

case "${1:-}" in
  --print-bin) echo "$HELM_BIN"; exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
esac

if [[ -x $HELM_BIN && -f $HELM_STAMP && "$(cat "$HELM_STAMP")" == "$(stamp_key)" ]]; then
  exit 0
fi
log "building helm $HELM_VERSION (go install, minutes cold)"
start=$SECONDS
mkdir -p "$HELM_DIR/bin"
tmp="$(mktemp -d "$HELM_DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# Outside any checkout (go install pkg@version ignores the caller's go.mod),
# static, into a temp dir first: a killed build never leaves a binary that a
# later run would trust. The version is stamped as helm's own release
# build does, so `helm version` says which helm it is.
(cd "$tmp" && CGO_ENABLED=0 GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" \
  go install -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" "$HELM_MODULE/cmd/helm@$HELM_VERSION") ||
  { log "go install $HELM_MODULE/cmd/helm@$HELM_VERSION failed"; exit 1; }
mv -f "$tmp/helm" "$HELM_BIN"
stamp_key >"$HELM_STAMP"
log "built helm $HELM_VERSION in $((SECONDS - start))s: $HELM_BIN"
