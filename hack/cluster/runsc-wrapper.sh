#!/usr/bin/env bash
# runsc (gVisor) as a runc-compatible OCI runtime for containerd's runc v2
# shim: up.sh copies this script into the cluster's state dir and names it as
# the runtime binary (BinaryName) of the `runsc` handler.
#
# Why a wrapper (details and error texts in hack/cluster/README.md):
#  * Debian's runsc package has no containerd-shim-runsc-v1, so runsc is
#    driven through containerd-shim-runc-v2 like runc would be.
#  * --platform=ptrace: this VM has no KVM.
#  * --network=host: runsc 20221219 refuses its own network stack in any
#    network namespace on this kernel ("cannot run with network enabled in
#    root network namespace": it detects the root namespace by the presence of
#    /proc/sys/net/core/rmem_default, which newer kernels have in every
#    namespace). With host networking the sandbox uses the pod's network
#    namespace through the host kernel; the pod's isolation rules still apply.
#  * --oci-seccomp: honour the pod's seccomp profile inside the sandbox;
#    except when this wrapper is installed as `runsc-default` (the
#    `gvisor-default` RuntimeClass): gVisor's default, as GKE Sandbox runs
#    it, where the Sentry's own host filter is the boundary and the pod's
#    profile is not loaded inside.
#  * One gVisor sandbox per container: runsc would put a pod's app containers
#    into the pause container's sandbox (CRI annotations), but then it reports
#    the sandbox's PID for every container and the runc shim never sees an app
#    container exit. Dropping those annotations at `create` gives each
#    container its own sandbox in the pod's namespaces.
set -euo pipefail

runsc="${SANDPROBE_RUNSC:?SANDPROBE_RUNSC (path of runsc) not set}"
log_dir="${SANDPROBE_RUNSC_LOG_DIR:-}"

bundle="" create=0 kill=0 prev=""
for a in "$@"; do
  case "$a" in
    create) create=1 ;;
    kill) kill=1 ;;
    --bundle=*|-b=*) bundle="${a#*=}" ;;
  esac
  case "$prev" in --bundle|-b) bundle="$a" ;; esac
  prev="$a"
done

if ((create)) && [[ -n $bundle && -f $bundle/config.json ]]; then
  tmp="$bundle/config.json.sandprobe"
  jq 'if .annotations then .annotations |= with_entries(select(
        .key != "io.kubernetes.cri.container-type" and
        .key != "io.kubernetes.cri.sandbox-id")) else . end' \
    "$bundle/config.json" > "$tmp"
  mv "$tmp" "$bundle/config.json"
fi

flags=(--platform=ptrace --network=host)
[[ ${0##*/} == runsc-default ]] || flags+=(--oci-seccomp)
[[ -n $log_dir ]] && flags+=("--debug-log=$log_dir/")

# `kill` of a container whose sandbox already exited: runsc says "sandbox is
# not running" (exit 128), which the runc shim does not recognise as "already
# finished" (it looks for runc's "container not running"), so containerd's
# CRI plugin retries stopping the exited container forever and the pod never
# completes. Translate the message.
if ((kill)); then
  out="$("$runsc" "${flags[@]}" "$@" 2>&1)" && rc=0 || rc=$?
  if ((rc == 0)); then
    [[ -z $out ]] || printf '%s\n' "$out"
    exit 0
  fi
  if [[ $out == *"is not running"* ]]; then
    echo "container not running" >&2
    exit 1
  fi
  printf '%s\n' "$out" >&2
  exit "$rc"
fi
exec "$runsc" "${flags[@]}" "$@"
