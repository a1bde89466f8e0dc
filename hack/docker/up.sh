#!/usr/bin/env bash
# Start sandprobe's private test dockerd (plus its own containerd) and wait
# until it runs containers under runc, runsc and runsc-nonet.
#
# Prints `export DOCKER_HOST=...` on stdout (progress goes to stderr), so
#   eval "$(hack/docker/up.sh)"
# works. Idempotent: if the daemon is already up and healthy it only prints.
#
# Network safety (see README.md): the daemon gets no default bridge
# (bridge=none), never touches iptables or ip_forward, and user-defined
# networks come from 10.213.0.0/16, which this script fences off with its own
# iptables chain. So a container is never routed off this machine and cannot
# reach services listening on the host.
#
# Environment:
#   SANDPROBE_DOCKER_SKIP_VERIFY=1   skip the runtime smoke test (faster restarts)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null  # (lib.sh beside this script)
source "$here/lib.sh"

log() { printf '[%s] up.sh: %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

[[ $EUID -eq 0 ]] || die "must run as root (dockerd needs it)"
for bin in dockerd containerd runsc "$DOCKER"; do
	command -v "$bin" >/dev/null || die "$bin not found (apt-get install docker.io runsc)"
done

mkdir -p "$SP_DOCKER_RUN" "$SP_DOCKER_LOG_DIR" "$SP_DOCKER_DATA_ROOT"
# Serialize concurrent up.sh/down.sh runs (e.g. parallel test packages).
exec 9>"$SP_DOCKER_RUN/lock"
flock 9

healthy() { sp_docker info >/dev/null 2>&1; }

print_env() { echo "export DOCKER_HOST=$SP_DOCKER_HOST"; }

# pid_alive PIDFILE: the process named in PIDFILE runs.
pid_alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# The fence: two chains of our own around the address pool of user-defined
# networks. Needed because with iptables=false Docker's `--internal` isolates
# nothing: containers on it still get a default route via the bridge (Docker
# normally enforces "internal" with iptables rules it now does not write), and
# the bridge address reaches every host service listening on 0.0.0.0.
#   INPUT:   nothing from the pool reaches the host itself.
#   FORWARD: nothing is routed out of or into the pool (traffic between
#            containers on one bridge never needs routing).
fence_pool() {
	if ! command -v iptables >/dev/null || ! iptables -S >/dev/null 2>&1; then
		log "WARNING: iptables unusable; user-defined networks are not fenced (bridge=none still holds)"
		return
	fi
	iptables -N SANDPROBE-DOCKER-IN 2>/dev/null || iptables -F SANDPROBE-DOCKER-IN
	iptables -A SANDPROBE-DOCKER-IN -s "$SP_DOCKER_POOL" -j DROP
	iptables -N SANDPROBE-DOCKER-FWD 2>/dev/null || iptables -F SANDPROBE-DOCKER-FWD
	iptables -A SANDPROBE-DOCKER-FWD -s "$SP_DOCKER_POOL" ! -d "$SP_DOCKER_POOL" -j DROP
	iptables -A SANDPROBE-DOCKER-FWD -d "$SP_DOCKER_POOL" ! -s "$SP_DOCKER_POOL" -j DROP
	iptables -C INPUT -j SANDPROBE-DOCKER-IN 2>/dev/null || iptables -I INPUT -j SANDPROBE-DOCKER-IN
	iptables -C FORWARD -j SANDPROBE-DOCKER-FWD 2>/dev/null || iptables -I FORWARD -j SANDPROBE-DOCKER-FWD
}

start_containerd() {
	# dockerd would otherwise adopt a system containerd at the default socket
	# (sharing its "moby" namespace with another dockerd) or supervise one of
	# its own; an explicit one with private paths is predictable.
	mkdir -p "$SP_CONTAINERD_RUN" "$SP_CONTAINERD_ROOT"
	cat >"$SP_DOCKER_RUN/containerd.toml" <<-EOF
		version = 2
		root = "$SP_CONTAINERD_ROOT"
		state = "$SP_CONTAINERD_RUN"
		# Docker does not need Kubernetes' CRI plugin; it would also want CNI.
		disabled_plugins = ["io.containerd.grpc.v1.cri"]
		[grpc]
		  address = "$SP_CONTAINERD_SOCK"
		[debug]
		  address = ""
		[metrics]
		  address = ""
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$SP_CONTAINERD_ROOT/opt"
	EOF
	# setsid: the daemons must outlive the shell (and CI step) that started them.
	# 9>&-: they must not inherit (and so hold forever) the up.sh lock.
	setsid containerd --config "$SP_DOCKER_RUN/containerd.toml" \
		>>"$SP_DOCKER_LOG_DIR/containerd.log" 2>&1 </dev/null 9>&- &
	echo $! >"$SP_CONTAINERD_PIDFILE"
	local i
	for ((i = 0; i < 100; i++)); do
		ctr --address "$SP_CONTAINERD_SOCK" version >/dev/null 2>&1 && return 0
		pid_alive "$SP_CONTAINERD_PIDFILE" || break
		sleep 0.2
	done
	tail -n 20 "$SP_DOCKER_LOG_DIR/containerd.log" >&2
	die "containerd did not come up (log: $SP_DOCKER_LOG_DIR/containerd.log)"
}

start_dockerd() {
	# Paths are flags (they derive from lib.sh); policy lives in daemon.json.
	setsid dockerd \
		--config-file "$here/daemon.json" \
		--host "$SP_DOCKER_HOST" \
		--containerd "$SP_CONTAINERD_SOCK" \
		--data-root "$SP_DOCKER_DATA_ROOT" \
		--exec-root "$SP_DOCKER_EXEC_ROOT" \
		--pidfile "$SP_DOCKER_PIDFILE" \
		--cgroup-parent sandprobe-docker \
		>>"$SP_DOCKER_LOG_DIR/dockerd.log" 2>&1 </dev/null 9>&- &
	local pid=$! i
	for ((i = 0; i < 300; i++)); do
		healthy && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	tail -n 30 "$SP_DOCKER_LOG_DIR/dockerd.log" >&2
	die "dockerd did not answer within 60s (log: $SP_DOCKER_LOG_DIR/dockerd.log)"
}

# run_smoke RUNTIME NETWORK runs the static smoke probe under the sandbox
# constraints and prints its report. create+start rather than `run --rm`: a
# runsc container that fails to start leaves its shim, gofer and sandbox
# processes behind, and only the container id finds them.
run_smoke() {
	local id rc=0 pid
	# stdout is the id; stderr only warnings ("IPv4 forwarding is disabled",
	# which is the point) or the reason it failed.
	id="$(sp_docker create --runtime "$1" --network "$2" \
		--read-only --user 65532 --cap-drop ALL --security-opt no-new-privileges \
		--tmpfs /tmp --tmpfs /workspace sandprobe/smoke:test 2>"$SP_DOCKER_RUN/create.err")" || {
		cat "$SP_DOCKER_RUN/create.err"
		return 1
	}
	sp_docker start --attach "$id" 2>&1 || rc=$?
	sp_docker rm -f "$id" >/dev/null 2>&1 || true
	grep -lF -- "$id" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 |
		while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done
	return "$rc"
}

# verify_runtimes checks that every runtime runs a container and that the
# runsc ones really are gVisor (its /proc/version claims Linux 4.4.0).
verify_runtimes() {
	local bin="$SP_DOCKER_RUN/smoke" out rt kernel
	(cd "$here/smoke" && CGO_ENABLED=0 go build -trimpath -o "$bin" .) ||
		die "building the smoke probe failed"
	DOCKER_HOST="$SP_DOCKER_HOST" "$here/../images/scratch.sh" sandprobe/smoke:test "$bin" >&2

	# "default" is the bastion case: with bridge=none it is a private netns
	# holding only loopback.
	for rt in runc:default runc:none runsc-nonet:none runsc-nonet:default runsc:none; do
		if ! out="$(run_smoke "${rt%%:*}" "${rt#*:}")"; then
			# Debian's runsc (20221219) decides "am I in the root netns?" by
			# whether /proc/sys/net/core/rmem_default exists; since Linux 6.x
			# that file exists in every netns, so runsc refuses any container
			# unless it runs with --network=none. Tolerate exactly that.
			if [[ "$rt" == runsc:* && "$out" == *"cannot run with network enabled in root network namespace"* ]]; then
				log "runtime runsc: known limitation on this kernel, use runsc-nonet (README.md): ${out##*: creating}"
				continue
			fi
			die "runtime $rt cannot run a container: $out"
		fi
		kernel="$(sed -n 's/^kernel: //p' <<<"$out")"
		case "$rt" in
		runsc*) [[ "$kernel" == "Linux version 4.4.0"* ]] || die "runtime $rt is not gVisor: $kernel" ;;
		*) [[ "$kernel" != "Linux version 4.4.0"* ]] || die "runtime $rt looks like gVisor: $kernel" ;;
		esac
		log "runtime ${rt%%:*} (--network ${rt#*:}) ok: ${kernel:0:40}"
	done
}

if healthy; then
	log "already running (pid $(cat "$SP_DOCKER_PIDFILE" 2>/dev/null || echo '?'))"
	print_env
	exit 0
fi

# Half-dead leftovers (a crashed dockerd, a containerd without dockerd, stale
# sockets or mounts) would make the new daemons fail in confusing ways.
log "cleaning up leftovers"
SP_DOCKER_LOCK_HELD=1 "$here/down.sh" >&2

start="$(date +%s%3N)"
fence_pool
start_containerd
start_dockerd
log "dockerd answers after $(awk -v s="$start" -v e="$(date +%s%3N)" 'BEGIN { printf "%.1f", (e - s) / 1000 }')s"
if [[ "${SANDPROBE_DOCKER_SKIP_VERIFY:-}" != 1 ]]; then
	verify_runtimes
	log "containers run after $(awk -v s="$start" -v e="$(date +%s%3N)" 'BEGIN { printf "%.1f", (e - s) / 1000 }')s"
fi
print_env
