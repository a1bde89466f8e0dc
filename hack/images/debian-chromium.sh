#!/usr/bin/env bash
# Build sandprobe/debian-chromium:test — a Debian bookworm minbase rootfs with
# headless Chromium, git, CA certificates and a font, a uid/gid 65532 user
# ("nonroot"), /tmp mode 1777 and an empty /workspace.
#
# There is no container registry here, so the image is made from a rootfs:
# debootstrap + apt-get in a chroot, tarred, then `docker import`ed.
# The tarball is cached under $SANDPROBE_CACHE/images/, keyed by everything
# that shapes it, so a rebuild is just an import (seconds) and a no-op when the
# image already matches the tarball.
#
# Usage: debian-chromium.sh [--rebuild]    (--rebuild ignores the cached rootfs)
set -euo pipefail

# shellcheck source=/dev/null  # (lib.sh beside this script)
source "$(dirname "$0")/lib.sh"

IMAGE=sandprobe/debian-chromium:test
SUITE=bookworm
# Same mirror as the host's apt sources: the only Debian mirror this machine reaches.
MIRROR="${SANDPROBE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SANDPROBE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
# fonts-dejavu-core: without any font Chromium renders text as nothing (or
# tofu boxes) in screenshots. ca-certificates: git/https inside the image.
PACKAGES=(chromium git ca-certificates fonts-dejavu-core)
NONROOT_UID=65532
# Bump RECIPE when the build steps below change in a way the key cannot see.
RECIPE=2

rebuild=false
[[ "${1:-}" == --rebuild ]] && rebuild=true

key="$(printf '%s\n' "$RECIPE" "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "${PACKAGES[@]}" "$NONROOT_UID" |
	sha256sum | cut -c1-16)"
tarball="$SP_IMAGE_CACHE/debian-chromium-$SUITE-$key.tar"

build_rootfs() {
	local work rootfs
	work="$(mktemp -d "$SP_IMAGE_CACHE/build.XXXXXX")"
	rootfs="$work/rootfs"
	# Unmount before deleting: an rm -rf through a live bind mount of the apt
	# cache would empty the cache.
	# shellcheck disable=SC2064
	trap "umount -R '$rootfs/proc' '$rootfs/var/cache/apt/archives' 2>/dev/null || true; rm -rf '$work'" EXIT

	log "debootstrap --variant=minbase $SUITE from $MIRROR"
	mkdir -p "$SP_IMAGE_CACHE/debs" "$SP_IMAGE_CACHE/apt-archives/partial"
	# --cache-dir keeps the base .debs between builds (a new cache key then
	# costs no downloads for the base system).
	debootstrap --variant=minbase --cache-dir="$SP_IMAGE_CACHE/debs" \
		"$SUITE" "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
		{ tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }

	# Same suites as the host: bookworm-security carries the current Chromium.
	cat >"$rootfs/etc/apt/sources.list" <<-SOURCES
		deb $MIRROR $SUITE main
		deb $MIRROR $SUITE-updates main
		deb $SECURITY_MIRROR $SUITE-security main
	SOURCES
	# No service may start inside the chroot during package installs.
	printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
	chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
	mount -t proc proc "$rootfs/proc"
	# Share downloaded .debs between builds through a bind-mounted apt cache.
	mount --bind "$SP_IMAGE_CACHE/apt-archives" "$rootfs/var/cache/apt/archives"

	log "apt-get install ${PACKAGES[*]}"
	chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get -qq update
	chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive LC_ALL=C \
		apt-get -qq -y --no-install-recommends install "${PACKAGES[@]}" >"$work/apt.log" 2>&1 ||
		{ tail -n 30 "$work/apt.log" >&2; die "apt-get install failed"; }

	# The sandbox runs as 65532; name it like distroless does.
	chroot "$rootfs" groupadd --gid "$NONROOT_UID" nonroot
	# (-K UID_MAX: 65532 is above login.defs' range; say it is meant.)
	chroot "$rootfs" useradd --uid "$NONROOT_UID" --gid "$NONROOT_UID" -K UID_MAX=65533 \
		--home-dir /home/nonroot --create-home --shell /bin/bash nonroot

	umount "$rootfs/var/cache/apt/archives" "$rootfs/proc"

	# Keep the image small: apt lists and caches, docs, man pages, gettext
	# translations (Chromium's own UI strings live in /usr/lib/chromium/locales).
	rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
		"$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/apt/* "$rootfs"/var/log/dpkg.log \
		"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
		"$rootfs"/usr/share/locale/* "$rootfs/usr/sbin/policy-rc.d"
	# Docker bind-mounts its own resolv.conf; do not ship the host's.
	: >"$rootfs/etc/resolv.conf"

	# /tmp and /workspace get a tmpfs at run time. Under runc that tmpfs takes
	# the *image directory's* mode (runc chmods the mount to it, overriding
	# --tmpfs mode=) and is owned by root, so only a 1777 mount point lets
	# uid 65532 write there. See hack/docker/README.md.
	chmod 1777 "$rootfs/tmp"
	install -d -m 1777 "$rootfs/workspace"

	log "writing $tarball"
	tar --numeric-owner -C "$rootfs" -cf "$work/rootfs.tar" .
	mv "$work/rootfs.tar" "$tarball" # atomic: a half-written tarball is never cached
	# Tarballs of older recipes are dead weight (~900 MB each).
	find "$SP_IMAGE_CACHE" -maxdepth 1 -name "debian-chromium-*.tar" ! -path "$tarball" -delete
	rm -rf "$work"
	trap - EXIT
}

start="$(now_ms)"
if $rebuild || [[ ! -s "$tarball" ]]; then
	build_rootfs
	log "rootfs built in $(secs_since "$start")s"
else
	log "using cached rootfs $tarball"
fi

require_daemon
if ! $rebuild && [[ "$(image_label "$IMAGE" sandprobe.rootfs)" == "$key" ]]; then
	log "$IMAGE is up to date (rootfs $key)"
else
	t="$(now_ms)"
	"$DOCKER" import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'WORKDIR /workspace' \
		--change 'CMD ["/bin/bash"]' \
		--change "LABEL sandprobe.rootfs=$key" \
		"$tarball" "$IMAGE" >/dev/null
	log "imported $IMAGE in $(secs_since "$t")s"
fi
log "done in $(secs_since "$start")s"
