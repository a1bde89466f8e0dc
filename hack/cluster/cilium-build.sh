# shellcheck shell=bash
# shellcheck disable=SC2154 # CACHE, repo_root, die: lib.sh's, sourced first by cilium.sh
# hack/cluster/cilium-build.sh — sourced by cilium.sh: build Cilium's agent,
# CNI plugin and cilium-dbg from the Go module proxy into the cache.

CILIUM_VERSION=v1.20.2
CILIUM_MODULE=github.com/cilium/cilium
CILIUM_DIR="$CACHE/cilium/$CILIUM_VERSION"
CILIUM_BIN="$CILIUM_DIR/bin"          # cilium-agent cilium-cni cilium-dbg clang
CILIUM_LIB="$CILIUM_DIR/lib"          # --lib-dir: lib/bpf holds the datapath sources
CILIUM_SRC="$CILIUM_DIR/src"          # writable copy of the module (go.mod edited)
CILIUM_STAMP="$CILIUM_BIN/.stamp"
# Two dependencies the module proxy does not serve at the versions Cilium
# pins: gobgp's pseudo-version (its served v4.7.0 builds), and
# sigs.k8s.io/mcs-api/controllers, of which Cilium uses one constant.
GOBGP_VERSION=v4.7.0
MCS_CONTROLLERS_VERSION=v0.5.2

cilium_stamp_key() { printf '%s %s gobgp=%s\n' "$CILIUM_VERSION" "$(go env GOVERSION)" "$GOBGP_VERSION"; }

# prepare_src: the module's read-only copy from the module cache, made
# writable outside any checkout, with the two replacements.
prepare_src() {
  local mod
  mod="$(cd / && GOFLAGS=-mod=mod go mod download -json "$CILIUM_MODULE@$CILIUM_VERSION" | jq -r .Dir)"
  [[ -d $mod ]] || die "go mod download $CILIUM_MODULE@$CILIUM_VERSION failed"
  rm -rf "$CILIUM_SRC" "$CILIUM_DIR/mcs-api-controllers"
  mkdir -p "$CILIUM_DIR"
  cp -a "$mod" "$CILIUM_SRC"
  chmod -R u+w "$CILIUM_SRC"
  mkdir -p "$CILIUM_DIR/mcs-api-controllers"
  printf 'module sigs.k8s.io/mcs-api/controllers\n\ngo 1.22\n' >"$CILIUM_DIR/mcs-api-controllers/go.mod"
  cat >"$CILIUM_DIR/mcs-api-controllers/controllers.go" <<'GO'
// Package controllers stands in for sigs.k8s.io/mcs-api/controllers, which
// the module proxy does not serve: Cilium uses only this constant of it.
package controllers

// DerivedServiceAnnotation is the value mcs-api v0.5.2 declares.
const DerivedServiceAnnotation = "multicluster.kubernetes.io/derived-service"
GO
  (cd "$CILIUM_SRC" &&
    go mod edit -replace "github.com/osrg/gobgp/v4=github.com/osrg/gobgp/v4@$GOBGP_VERSION" \
      -replace "sigs.k8s.io/mcs-api/controllers@$MCS_CONTROLLERS_VERSION=../mcs-api-controllers")
}

build() {
  if [[ -x $CILIUM_BIN/cilium-agent && -f $CILIUM_STAMP && "$(cat "$CILIUM_STAMP")" == "$(cilium_stamp_key)" ]]; then
    return 0
  fi
  command -v clang-19 >/dev/null || "$repo_root/hack/install-deps.sh"
  log "building cilium $CILIUM_VERSION (agent, CNI plugin, cilium-dbg; tens of minutes cold)"
  local start=$SECONDS tmp
  prepare_src
  tmp="$(mktemp -d "$CILIUM_DIR/.build.XXXXXX")"
  # One go build for the three: they share most packages. Into a temp dir
  # first, so a killed build never leaves a binary a later run would trust.
  # Its own build cache: the cold time measured is a cold time, and a
  # version bump reuses it.
  if ! (cd "$CILIUM_SRC" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=mod -trimpath" \
    GOCACHE="$CACHE/cilium/go-build" \
    go build -ldflags='-s -w' -o "$tmp/" ./daemon ./plugins/cilium-cni ./cilium-dbg); then
    rm -rf "$tmp"
    die "go build of cilium $CILIUM_VERSION failed"
  fi
  mkdir -p "$CILIUM_BIN" "$CILIUM_LIB"
  mv -f "$tmp/daemon" "$CILIUM_BIN/cilium-agent"
  mv -f "$tmp/cilium-cni" "$CILIUM_BIN/cilium-cni"
  mv -f "$tmp/cilium-dbg" "$CILIUM_BIN/cilium-dbg"
  rm -rf "$tmp" "$CILIUM_LIB/bpf"
  cp -a "$CILIUM_SRC/bpf" "$CILIUM_LIB/bpf"
  # The agent runs plain `clang`; Debian names it clang-19.
  ln -sfn /usr/bin/clang-19 "$CILIUM_BIN/clang"
  cilium_stamp_key >"$CILIUM_STAMP"
  log "built cilium $CILIUM_VERSION in $((SECONDS - start))s: $CILIUM_BIN"
}

