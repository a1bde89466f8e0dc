#!/usr/bin/env bash
# Build a scratch image that holds one static binary at /sandprobe, plus
# /tmp and /workspace (both mode 1777), via `docker import`.
#
# Usage: scratch.sh NAME:TAG BINARY [FILE | SRC:/DEST ...]
#   FILE        copied to /<basename of FILE>
#   SRC:/DEST   copied to /DEST
#
# The image's ENTRYPOINT is ["/sandprobe"] and WORKDIR is /workspace.
# Re-running with identical inputs is a no-op: the image carries a label with a
# hash of its contents. (The rootfs is a few MB, so it is streamed into
# `docker import` rather than cached as a tarball.)
set -euo pipefail

# shellcheck source=/dev/null  # (lib.sh beside this script)
source "$(dirname "$0")/lib.sh"

[[ $# -ge 2 ]] || die "usage: ${0##*/} NAME:TAG BINARY [FILE | SRC:/DEST ...]"
image="$1"
binary="$2"
shift 2
[[ -f "$binary" ]] || die "no such binary: $binary"

# A scratch image has no libc or loader: a dynamic binary fails with a
# confusing "no such file or directory" at run time. Catch it here.
if command -v file >/dev/null && ! file -L "$binary" | grep -Eq 'statically linked|static-pie linked'; then
	die "$binary is not statically linked (build it with CGO_ENABLED=0)"
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

install -m 0755 "$binary" "$stage/sandprobe"
for spec in "$@"; do
	if [[ "$spec" == *:/* ]]; then
		src="${spec%%:/*}"
		dest="/${spec#*:/}"
	else
		src="$spec"
		dest="/$(basename "$spec")"
	fi
	[[ -e "$src" ]] || die "no such file: $src"
	mkdir -p "$stage$(dirname "$dest")"
	cp -a "$src" "$stage$dest"
done

# Both must be 1777 *in the image*: runc gives a `--tmpfs` mount the mode of
# the directory it covers (overriding mode=) and root ownership, so with a
# 0755 mount point a uid-65532 process cannot write its own /tmp or
# /workspace. (gVisor ignores the image mode: its tmpfs is 1777.)
install -d -m 1777 "$stage/tmp" "$stage/workspace"

# Hash the exact tar stream (mtimes pinned) so that identical inputs give an
# identical key and we can skip the import.
tar_stream() {
	tar --numeric-owner --sort=name --mtime=@0 -C "$stage" -cf - .
}
key="$(tar_stream | sha256sum | cut -c1-16)"

require_daemon
if [[ "$(image_label "$image" sandprobe.rootfs)" == "$key" ]]; then
	log "$image is up to date ($key)"
	exit 0
fi

start="$(now_ms)"
tar_stream | "$DOCKER" import \
	--change 'ENTRYPOINT ["/sandprobe"]' \
	--change 'WORKDIR /workspace' \
	--change "LABEL sandprobe.rootfs=$key" \
	- "$image" >/dev/null
log "imported $image in $(secs_since "$start")s"
