# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Shared settings for hack/docker/*.sh and hack/images/*.sh. Source it, do not run it.
#
# Everything lives under paths of its own so this dockerd never collides with
# a system dockerd/containerd or with another project's test daemon:
#   state that must survive reboots/CI runs (image cache): /var/lib/sandprobe-docker
#   runtime state (sockets, pids, netns, mounts):          /run/sandprobe-docker
#   logs (kept after a CI run for post-mortems):            /var/log/sandprobe-docker

SP_DOCKER_DATA_ROOT=/var/lib/sandprobe-docker
SP_DOCKER_RUN=/run/sandprobe-docker
SP_DOCKER_LOG_DIR=/var/log/sandprobe-docker
SP_DOCKER_SOCK="$SP_DOCKER_RUN/docker.sock"
SP_DOCKER_HOST="unix://$SP_DOCKER_SOCK"
SP_DOCKER_PIDFILE="$SP_DOCKER_RUN/docker.pid"
SP_DOCKER_EXEC_ROOT="$SP_DOCKER_RUN/exec"
SP_CONTAINERD_RUN="$SP_DOCKER_RUN/containerd"
SP_CONTAINERD_SOCK="$SP_CONTAINERD_RUN/containerd.sock"
SP_CONTAINERD_PIDFILE="$SP_DOCKER_RUN/containerd.pid"
SP_CONTAINERD_ROOT="$SP_DOCKER_DATA_ROOT/containerd"

# Address pool for user-defined networks (`docker network create --internal`).
# A fixed, unusual range lets up.sh fence it off with iptables (see up.sh).
SP_DOCKER_POOL=10.213.0.0/16

# The Debian docker CLI (20.10) matches the Debian daemon; the newer CLI in
# /usr/local/bin negotiates down too, but the matched one avoids surprises.
if [[ -z "${DOCKER:-}" ]]; then
	if [[ -x /usr/bin/docker ]]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi

# sp_docker runs the CLI against our private daemon whatever DOCKER_HOST says.
sp_docker() { DOCKER_HOST="$SP_DOCKER_HOST" "$DOCKER" "$@"; }
