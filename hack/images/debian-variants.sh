#!/usr/bin/env bash
# Build the sabotaged variants of sandprobe/debian-chromium:test that the
# sandbox checks must catch:
#
#   sandprobe/debian-nochromium:test     Chromium removed (dpkg --purge)
#   sandprobe/debian-nogit:test          git removed
#   sandprobe/debian-tmp0755:test        /tmp mode 0755 instead of 1777
#   sandprobe/debian-rootonly:test       built for root: git installed mode 0700 root:root,
#                                        so the sandbox's uid cannot run it
#   sandprobe/debian-writableroot:test   ENTRYPOINT writes /var/run/sandprobe-app/ at
#                                        start: works on a writable root (also as
#                                        uid 65532), fails under --read-only
#
# Each is one small layer on top of the base image: a throwaway container
# (no network, runc) makes the change and `docker commit` saves it. That
# costs seconds and shares the base layer on disk. A variant is skipped
# when it was already built from the same base image with the same recipe.
#
# Usage: debian-variants.sh [VARIANT ...]   (default: all; VARIANT is e.g. nogit)
# The recipes below are single-quoted on purpose: they run in the container's sh.
# shellcheck disable=SC2016
set -euo pipefail

# shellcheck source=/dev/null  # (lib.sh beside this script)
source "$(dirname "$0")/lib.sh"

BASE=sandprobe/debian-chromium:test
# Bump when derive() itself changes in a way the per-variant key cannot see.
RECIPE=2

# `docker commit` saves the throwaway container's config, so its
# `/bin/sh -euc SCRIPT` command must be replaced by the base image's CMD.
# (The base has no ENTRYPOINT and no USER, and the container sets neither:
# commit cannot clear an ENTRYPOINT once set; `--change 'ENTRYPOINT []'` is ignored.)
DEFAULT_CMD=(--change 'CMD ["/bin/bash"]')

# derive NAME SCRIPT [--change ...]: run SCRIPT as root in a container of
# BASE (the image runs as root) and commit the result as
# sandprobe/debian-NAME:test with the given config changes.
derive() {
	local name="sandprobe/debian-$1:test" script="$2" key cid start old_id
	shift 2
	key="$(printf '%s\n' "$RECIPE" "$base_id" "$script" "$@" | sha256sum | cut -c1-16)"
	if [[ "$(image_label "$name" sandprobe.derived)" == "$key" ]]; then
		log "$name is up to date ($key)"
		return
	fi
	start="$(now_ms)"
	cid="$("$DOCKER" create --network none --runtime runc "$BASE" /bin/sh -euc "$script")"
	if ! "$DOCKER" start --attach "$cid" >&2; then
		"$DOCKER" rm -f "$cid" >/dev/null
		die "building $name failed"
	fi
	old_id="$("$DOCKER" image inspect -f '{{.Id}}' "$name" 2>/dev/null || true)"
	"$DOCKER" commit "$@" \
		--change "LABEL sandprobe.derived=$key" "$cid" "$name" >/dev/null
	"$DOCKER" rm -f "$cid" >/dev/null
	# Drop the superseded image (if no container still uses it) so stale
	# variants do not pile up in the data root.
	[[ -z "$old_id" ]] || "$DOCKER" rmi "$old_id" >/dev/null 2>&1 || true
	log "built $name in $(secs_since "$start")s"
}

build_nochromium() {
	derive nochromium '
		dpkg --purge chromium chromium-common >/dev/null
		! command -v chromium' \
		"${DEFAULT_CMD[@]}"
}

build_nogit() {
	derive nogit '
		dpkg --purge git git-man >/dev/null
		! command -v git' \
		"${DEFAULT_CMD[@]}"
}

build_rootonly() {
	derive rootonly '
		chmod 0700 "$(command -v git)"
		[ "$(stat -c %a "$(command -v git)")" = 700 ]' \
		"${DEFAULT_CMD[@]}"
}

build_tmp0755() {
	derive tmp0755 '
		chmod 0755 /tmp
		[ "$(stat -c %a /tmp)" = 755 ]' \
		"${DEFAULT_CMD[@]}"
}

build_writableroot() {
	# The directory belongs to 65532 so that the entrypoint works whenever the
	# root is writable, whoever runs it: the only thing that breaks it is a
	# read-only root. Like many real images it records a pid file first.
	derive writableroot '
		install -d -o 65532 -g 65532 /var/run/sandprobe-app
		cat >/usr/local/bin/sandprobe-app-start <<-"EOF"
			#!/bin/sh
			# Writes its pid to the root filesystem before starting the command.
			set -e
			echo $$ >/var/run/sandprobe-app/pid
			exec "$@"
		EOF
		chmod 0755 /usr/local/bin/sandprobe-app-start' \
		--change 'ENTRYPOINT ["/usr/local/bin/sandprobe-app-start"]' \
		--change 'CMD ["/bin/bash"]'
}

variants=("$@")
[[ ${#variants[@]} -gt 0 ]] || variants=(nochromium nogit rootonly tmp0755 writableroot)

require_daemon
image_exists "$BASE" || die "$BASE missing: run hack/images/debian-chromium.sh first"
base_id="$("$DOCKER" image inspect -f '{{.Id}}' "$BASE")"

for v in "${variants[@]}"; do
	declare -F "build_$v" >/dev/null || die "unknown variant: $v"
	"build_$v"
done
