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
CACHE="${SANDPROBE_CACHE:-/var/cache/sandprobe}"
KWOK_DIR="$CACHE/kwok/$KWOK_VERSION"
KWOK_BIN="$KWOK_DIR/bin/kwok"
KWOK_STAMP="$KWOK_DIR/bin/.stamp"

log() { printf '[kwok %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
stamp_key() { printf '%s %s\n' "$KWOK_VERSION" "$(go env GOVERSION)"; }

case "${1:-}" in
  --print-bin) echo "$KWOK_BIN"; exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
esac

if [[ -x $KWOK_BIN && -f $KWOK_STAMP && "$(cat "$KWOK_STAMP")" == "$(stamp_key)" ]]; then
  exit 0
fi
log "building kwok $KWOK_VERSION (go install, ~3-5 min cold)"
start=$SECONDS
mkdir -p "$KWOK_DIR/bin"
tmp="$(mktemp -d "$KWOK_DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# Outside any checkout (go install pkg@version ignores the caller's go.mod),
# static, into a temp dir first: a killed build never leaves a binary that a
# later run would trust.
(cd "$tmp" && CGO_ENABLED=0 GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" \
  go install -ldflags='-s -w' "$KWOK_MODULE/cmd/kwok@$KWOK_VERSION") ||
  { log "go install $KWOK_MODULE/cmd/kwok@$KWOK_VERSION failed"; exit 1; }
mv -f "$tmp/kwok" "$KWOK_BIN"
stamp_key >"$KWOK_STAMP"
log "built kwok $KWOK_VERSION in $((SECONDS - start))s: $KWOK_BIN"
