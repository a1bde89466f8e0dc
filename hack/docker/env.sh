# shellcheck shell=bash
# Source this to point docker clients at sandprobe's private test daemon:
#   source hack/docker/env.sh
# It only sets variables (no `set -e` here: it runs in the caller's shell).
# Start the daemon with hack/docker/up.sh.
# shellcheck source=/dev/null  # (lib.sh beside this file)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export DOCKER_HOST="$SP_DOCKER_HOST"
# DOCKER: the CLI that matches the daemon (Debian's 20.10 when present).
export DOCKER
