# shellcheck shell=bash
# Shared helpers for hack/images/*.sh. Source it, do not run it.

SP_HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null  # (../docker/lib.sh)
source "$SP_HACK_DIR/docker/lib.sh"

# Rootfs tarballs are cached here; they survive between CI runs so that a
# rebuild is a `docker import` (seconds) instead of a debootstrap (minutes).
SP_IMAGE_CACHE="${SANDPROBE_CACHE:-/var/cache/sandprobe}/images"
mkdir -p "$SP_IMAGE_CACHE"

# The image scripts talk to the private daemon unless the caller points
# DOCKER_HOST somewhere on purpose.
export DOCKER_HOST="${DOCKER_HOST:-$SP_DOCKER_HOST}"

log() { printf '%s %s\n' "[$(date +%T)] ${0##*/}:" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# now_ms prints a monotonic-enough wall clock in milliseconds, for timings.
now_ms() { date +%s%3N; }

# secs_since START_MS prints the elapsed seconds with one decimal.
secs_since() { awk -v s="$1" -v e="$(now_ms)" 'BEGIN { printf "%.1f", (e - s) / 1000 }'; }

# image_exists NAME:TAG
image_exists() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

# image_label NAME:TAG LABEL prints a label of a local image ("" if none).
image_label() {
	"$DOCKER" image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

# require_daemon fails early with a hint when the private dockerd is down.
require_daemon() {
	"$DOCKER" info >/dev/null 2>&1 ||
		die "no docker daemon at DOCKER_HOST=$DOCKER_HOST; run hack/docker/up.sh first"
}
