#!/usr/bin/env bash
# Build every local image the Docker tests need and print how long each step
# took. Starts the private dockerd first if it is not running.
#
#   sandprobe/smoke:test                 (by hack/docker/up.sh)
#   sandprobe/debian-chromium:test       debian-chromium.sh
#   sandprobe/debian-{nochromium,nogit,rootonly,tmp0755,writableroot}:test
#                                        debian-variants.sh
#
# Not built here: the image of the sandprobe binary itself, which needs the
# binary; use scratch.sh NAME:TAG BINARY for that.
#
# Cold (empty cache): about 4 minutes, mostly debootstrap + apt downloads.
# From the cache in $SANDPROBE_CACHE/images: seconds.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"

# up.sh prints `export DOCKER_HOST=...`; it is a no-op when already healthy.
eval "$("$here/../docker/up.sh")"
# shellcheck source=/dev/null  # (lib.sh beside this script)
source "$here/lib.sh"

steps=()
timed() {
	local name="$1" start
	shift
	start="$(now_ms)"
	"$@"
	steps+=("$(printf '%-18s %6ss' "$name" "$(secs_since "$start")")")
}

total="$(now_ms)"
timed debian-chromium "$here/debian-chromium.sh"
timed debian-variants "$here/debian-variants.sh"

# Superseded builds leave untagged images behind; only ours carry this label.
"$DOCKER" image prune -f --filter label=sandprobe.rootfs >/dev/null

echo "image build times:"
printf '  %s\n' "${steps[@]}"
printf '  %-18s %6ss\n' total "$(secs_since "$total")"
"$DOCKER" image ls --filter 'reference=sandprobe/*' --format '  {{.Repository}}:{{.Tag}}\t{{.Size}}'
