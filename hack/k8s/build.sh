#!/usr/bin/env bash
# Build the Kubernetes control-plane/node binaries and etcd that sandprobe's
# cluster tests run, from the Go module proxy (the test machine reaches no
# container registry and no release download site, so compiling is the only
# way to get them).
#
#   hack/k8s/build.sh                  build what is missing, print a summary
#   hack/k8s/build.sh --print-bin-dir  print the bin dir (no build)
#   hack/k8s/build.sh --print-assets   print a dir usable as KUBEBUILDER_ASSETS
#                                      (kube-apiserver, etcd, kubectl; no build)
#   hack/k8s/build.sh --force          rebuild even if the stamps say up to date
#
# Output: ${SANDPROBE_CACHE:-/var/cache/sandprobe}/k8s/<k8s version>/bin/
# Each component group has a stamp file next to the binaries whose content is
# the version plus a hash of the pinning go.mod/go.sum, so a rerun is a no-op
# and a version bump rebuilds exactly what changed.
#
# Costs measured on the 2-core test VM: the four k8s binaries + kubectl in one
# `go build` take ~15 min cold (≈4 GB of Go build cache), etcd 1-2 min.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools_dir="$here/tools"
etcd_dir="$here/etcd"

# Versions come from the pinning modules, so there is one source of truth.
k8s_version="$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$tools_dir/go.mod")"
etcd_version="$(awk '$1=="require" && $2=="go.etcd.io/etcd/server/v3" {print $3}' "$etcd_dir/go.mod")"
: "${k8s_version:?could not read k8s.io/kubernetes version from $tools_dir/go.mod}"
: "${etcd_version:?could not read etcd version from $etcd_dir/go.mod}"

cache="${SANDPROBE_CACHE:-/var/cache/sandprobe}"
bin_dir="$cache/k8s/$k8s_version/bin"

force=0
case "${1:-}" in
  --print-bin-dir|--print-assets) echo "$bin_dir"; exit 0 ;;
  --force) force=1 ;;
  "") ;;
  -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
esac

mkdir -p "$bin_dir"
export CGO_ENABLED=0     # static binaries; every component here builds without cgo
export GOFLAGS="${GOFLAGS:-} -trimpath"
export GOTOOLCHAIN=local # never download another Go toolchain

log() { printf '[build %(%H:%M:%S)T] %s\n' -1 "$*"; }

# stamp_key DIR VERSION: what a stamp must contain for DIR's binaries to be
# current: the pinned version, a hash of go.mod+go.sum, and the Go version.
stamp_key() {
  printf '%s %s %s\n' "$2" "$(cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-16)" "$(go env GOVERSION)"
}

# up_to_date STAMP KEY BIN...: stamp matches and every binary exists.
up_to_date() {
  local stamp="$1" key="$2"; shift 2
  [[ $force == 0 && -f $stamp && "$(cat "$stamp")" == "$key" ]] || return 1
  local b
  for b in "$@"; do [[ -x $bin_dir/$b ]] || return 1; done
}

summary=()

# ---- Kubernetes -------------------------------------------------------------
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
k8s_stamp="$bin_dir/.stamp-kubernetes"
k8s_key="$(stamp_key "$tools_dir" "$k8s_version")"
if up_to_date "$k8s_stamp" "$k8s_key" "${k8s_bins[@]}"; then
  summary+=("kubernetes $k8s_version: up to date (skipped)")
else
  log "building kubernetes $k8s_version: ${k8s_bins[*]} (cold: ~15 min on 2 cores)"
  start=$SECONDS
  # Version metadata normally injected by kubernetes' own Makefile; without it
  # components report v0.0.0-master and kubectl warns about version skew.
  minor="${k8s_version#v*.}"; minor="${minor%%.*}"
  ver_ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ver_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ver_ldflags+=" -X $pkg.gitCommit=module-proxy -X $pkg.gitTreeState=clean"
    ver_ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  pkgs=()
  for b in "${k8s_bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  # Build into a temp dir and move into place only on success, so a killed
  # build never leaves a half-written binary that a later run would trust.
  tmp="$(mktemp -d "$bin_dir/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # One `go build` for all of them: shared packages compile once.
  (cd "$tools_dir" && go build -o "$tmp/" -ldflags="-s -w$ver_ldflags" "${pkgs[@]}")
  for b in "${k8s_bins[@]}"; do mv -f "$tmp/$b" "$bin_dir/$b"; done
  rm -rf "$tmp"; trap - EXIT
  echo "$k8s_key" > "$k8s_stamp"
  summary+=("kubernetes $k8s_version: built ${k8s_bins[*]} in $((SECONDS - start))s")
fi

# ---- etcd -------------------------------------------------------------------
etcd_stamp="$bin_dir/.stamp-etcd"
etcd_key="$(stamp_key "$etcd_dir" "$etcd_version")"
if up_to_date "$etcd_stamp" "$etcd_key" etcd; then
  summary+=("etcd $etcd_version: up to date (skipped)")
else
  log "building etcd $etcd_version (~1-2 min)"
  start=$SECONDS
  tmp="$(mktemp -d "$bin_dir/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$etcd_dir" && go build -o "$tmp/etcd" \
    -ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" \
    go.etcd.io/etcd/server/v3)
  mv -f "$tmp/etcd" "$bin_dir/etcd"
  rm -rf "$tmp"; trap - EXIT
  echo "$etcd_key" > "$etcd_stamp"
  summary+=("etcd $etcd_version: built in $((SECONDS - start))s")
fi

log "done in ${SECONDS}s"
printf '  %s\n' "${summary[@]}"
echo "  bin dir / KUBEBUILDER_ASSETS: $bin_dir"
