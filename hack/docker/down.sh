#!/usr/bin/env bash
# Stop sandprobe's private dockerd and containerd and clean up what they leave
# behind: shims and gVisor sandboxes, mounts, network namespaces, pid files,
# sockets and the iptables fence. Harmless when nothing is running.
#
# Keeps the data root (/var/lib/sandprobe-docker: the imported images) and the
# logs (/var/log/sandprobe-docker).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null  # (lib.sh beside this script)
source "$here/lib.sh"

log() { printf '[%s] down.sh: %s\n' "$(date +%T)" "$*" >&2; }

[[ $EUID -eq 0 ]] || {
	log "ERROR: must run as root"
	exit 1
}

if [[ "${SP_DOCKER_LOCK_HELD:-}" != 1 ]]; then
	mkdir -p "$SP_DOCKER_RUN"
	exec 9>"$SP_DOCKER_RUN/lock"
	flock 9
fi

# ours_pids prints the pids of every process whose command line mentions our
# private run dir: dockerd (--host), containerd (--config), the containerd
# shims (-address), runc/runsc and gVisor's sandbox and gofer (--root). Only
# this daemon's processes carry that path, so nothing else is touched.
ours_pids() {
	local d pid
	for d in /proc/[0-9]*; do
		pid="${d#/proc/}"
		[[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
		# (a process may vanish between the glob and the read: ignore errors)
		if { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null | grep -qF -- "$SP_DOCKER_RUN/"; then
			echo "$pid"
		fi
	done
}

# stop_pidfile PIDFILE NAME SECONDS: SIGTERM the process if it is still NAME,
# wait for it to exit, then SIGKILL.
stop_pidfile() {
	local pidfile="$1" name="$2" secs="$3" pid i
	[[ -s "$pidfile" ]] || return 0
	pid="$(cat "$pidfile")"
	# A stale pidfile may name a reused pid: check the process really is NAME.
	[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]] || return 0
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < secs * 5; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	log "$name did not stop in ${secs}s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
}

# dockerd stops its containers on SIGTERM (up to its 15s shutdown timeout).
stop_pidfile "$SP_DOCKER_PIDFILE" dockerd 30
stop_pidfile "$SP_CONTAINERD_PIDFILE" containerd 10

# Anything left (orphaned shims, gVisor sandboxes of killed containers).
pids="$(ours_pids)"
if [[ -n "$pids" ]]; then
	log "killing leftover processes: ${pids//$'\n'/ }"
	# shellcheck disable=SC2086
	kill -KILL $pids 2>/dev/null || true
	sleep 0.5
fi

# Mounts: container rootfs overlays, /dev/shm tmpfs, netns bind mounts.
# Deepest first; lazily if something still holds them.
mapfile -t mounts < <(findmnt -rn -o TARGET |
	grep -E "^($SP_DOCKER_RUN|$SP_DOCKER_DATA_ROOT)(/|$)" | sort -r || true)
for m in "${mounts[@]}"; do
	# findmnt escapes blanks as \x20; our paths have none.
	umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "WARNING: cannot unmount $m"
done
[[ ${#mounts[@]} -eq 0 ]] || log "unmounted ${#mounts[@]} mounts"

# Empty cgroups of old containers (cgroupfs driver, --cgroup-parent).
for cg in /sys/fs/cgroup/*/sandprobe-docker /sys/fs/cgroup/sandprobe-docker; do
	[[ -d "$cg" ]] || continue
	find "$cg" -depth -mindepth 1 -type d -exec rmdir {} + 2>/dev/null || true
	rmdir "$cg" 2>/dev/null || true
done

# The iptables fence up.sh put around the container address pool.
if command -v iptables >/dev/null; then
	for hc in INPUT:SANDPROBE-DOCKER-IN FORWARD:SANDPROBE-DOCKER-FWD; do
		hook="${hc%%:*}" chain="${hc#*:}"
		iptables -S "$chain" >/dev/null 2>&1 || continue
		while iptables -D "$hook" -j "$chain" 2>/dev/null; do :; done
		iptables -F "$chain"
		iptables -X "$chain"
	done
	# The isolation rules runner/docker's agentbox tests write for their
	# --internal bridges (spabXXXXXXXX), if a killed test left them.
	# (None left is the usual case: grep finding nothing must not end the
	# script under pipefail, or up.sh, which runs this first, fails.)
	{ iptables -S FORWARD 2>/dev/null || true; } | { grep -E -- '-[io] spab[0-9a-f]{8} ' || true; } | sed 's/^-A /-D /' |
		while read -r -a rule; do iptables "${rule[@]}" || true; done
fi

# Sockets, pid files, exec root (netns files, runtime state). Keep the lock.
find "$SP_DOCKER_RUN" -mindepth 1 -maxdepth 1 ! -name lock -exec rm -rf {} + 2>/dev/null || true
