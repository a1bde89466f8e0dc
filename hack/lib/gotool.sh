# shellcheck shell=bash
# gotool NAME VERSION PACKAGE LDFLAGS [--print-bin|-h|--help]: build the Go
# command PACKAGE@VERSION (a module path's cmd/NAME) from the Go module proxy
# into ${SANDPROBE_CACHE:-/var/cache/sandprobe}/NAME/VERSION/bin/NAME, once:
# the binary is stamped with its version and the Go that built it, and a
# rerun with the same stamp does nothing. Sourced by hack/kwok/build.sh and
# hack/helm/build.sh, whose headers (lines 2-12) are their --help.
gotool() {
  local name=$1 version=$2 pkg=$3 ldflags=$4 arg=${5:-} script=${BASH_SOURCE[1]}
  local dir="${SANDPROBE_CACHE:-/var/cache/sandprobe}/$name/$version"
  local bin="$dir/bin/$name" stamp="$dir/bin/.stamp" key tmp start
  log() { printf '[%s %(%H:%M:%S)T] %s\n' "$name" -1 "$*" >&2; }
  case "$arg" in
    --print-bin) echo "$bin"; return 0 ;;
    "") ;;
    -h|--help) sed -n '2,12p' "$script" | sed 's/^# \{0,1\}//'; return 0 ;;
    *) echo "unknown argument: $arg" >&2; return 2 ;;
  esac
  key="$version $(go env GOVERSION)"
  if [[ -x $bin && -f $stamp && "$(cat "$stamp")" == "$key" ]]; then
    return 0
  fi
  log "building $name $version (go install, minutes cold)"
  start=$SECONDS
  mkdir -p "$dir/bin"
  tmp="$(mktemp -d "$dir/.build.XXXXXX")"
  # shellcheck disable=SC2064 # the path, expanded now: tmp is local
  trap "rm -rf '$tmp'" EXIT
  # Outside any checkout (go install pkg@version ignores the caller's
  # go.mod), static, into a temp dir first: a killed build never leaves a
  # binary that a later run would trust.
  if ! (cd "$tmp" && CGO_ENABLED=0 GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" \
    go install -ldflags="$ldflags" "$pkg@$version"); then
    log "go install $pkg@$version failed"
    return 1
  fi
  mv -f "$tmp/$name" "$bin"
  printf '%s\n' "$key" >"$stamp"
  log "built $name $version in $((SECONDS - start))s: $bin"
}
