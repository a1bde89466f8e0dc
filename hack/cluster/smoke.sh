#!/usr/bin/env bash
# Smoke test of the test cluster, end to end:
#   up.sh -> check-isolation.sh -> for runtimeClassName runc and gvisor: a pod
#   with sandprobe's sandbox security context runs the probe image, which
#   prints a JSON report to stdout and to its termination message -> wait for
#   Succeeded -> read `kubectl logs` and the termination message and check the
#   report -> down.sh (also on failure).
#
#   hack/cluster/smoke.sh            # full run
#   SANDPROBE_SMOKE_KEEP=1 hack/cluster/smoke.sh   # leave the cluster up
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root

t_all=$(now_ns)
results=()
keep="${SANDPROBE_SMOKE_KEEP:-0}"
finish() {
  local rc=$?
  if ((rc != 0)) && [[ -d $LOGS ]]; then
    log "smoke test failed; last kubelet/containerd log lines:"
    tail -n 15 "$LOGS/kubelet.log" "$LOGS/containerd.log" >&2 2>/dev/null || true
  fi
  if [[ $keep != 1 ]]; then "$cluster_lib_dir/down.sh" || rc=1; fi
  exit "$rc"
}
trap finish EXIT

t=$(now_ns)
"$cluster_lib_dir/up.sh" >/dev/null
results+=("$(printf '%-34s %6d ms' "up.sh" "$(ms_since "$t")")")

# From a netns on the bridge and from real runc and gVisor pods.
"$cluster_lib_dir/check-isolation.sh" --pods

# ValidatingAdmissionPolicy is enforced: a policy denying one ConfigMap name.
# Policies take effect asynchronously (about a second), hence the retries.
t=$(now_ns)
kc apply -f - >/dev/null <<'EOF'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: smoke-deny-configmap}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "object.metadata.name != 'smoke-forbidden'"
    message: "smoke: this ConfigMap name is forbidden"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: smoke-deny-configmap}
spec:
  policyName: smoke-deny-configmap
  validationActions: [Deny]
EOF
vap_denies() {
  local out
  if out="$(kc create configmap smoke-forbidden 2>&1)"; then
    kc delete configmap smoke-forbidden >/dev/null
    return 1
  fi
  [[ $out == *"denied request: smoke: this ConfigMap name is forbidden"* ]]
}
wait_for "ValidatingAdmissionPolicy to deny" 30 vap_denies || die "ValidatingAdmissionPolicy not enforced"
kc delete validatingadmissionpolicybinding,validatingadmissionpolicy smoke-deny-configmap >/dev/null
results+=("$(printf '%-34s %6d ms' "ValidatingAdmissionPolicy denies" "$(ms_since "$t")")")
log "ValidatingAdmissionPolicy enforced"

# check EXPR JSON: jq boolean assertion on the probe's report.
fails=0
check() {
  if jq -e "$1" >/dev/null <<<"$2"; then
    printf '  ok    %s\n' "$1"
  else
    printf '  FAIL  %s\n' "$1"
    fails=$((fails + 1))
  fi
}

for rc in runc gvisor; do
  name="smoke-$rc"
  t=$(now_ns)
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
spec:
  runtimeClassName: $rc
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: probe
    image: $PROBE_IMAGE
    imagePullPolicy: Never
    terminationMessagePolicy: File
    securityContext:
      runAsNonRoot: true
      runAsUser: 65532
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
      seccompProfile: {type: RuntimeDefault}
EOF
  if ! kc wait pod "$name" --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null; then
    kc get pod "$name" -o yaml >&2 || true
    die "pod $name did not reach Succeeded"
  fi
  ms=$(ms_since "$t")
  results+=("$(printf '%-34s %6d ms' "pod $name to Succeeded" "$ms")")
  logs="$(kc logs "$name")"
  msg="$(kc get pod "$name" -o jsonpath='{.status.containerStatuses[0].state.terminated.message}')"
  log "pod $name Succeeded in $ms ms; kubectl logs: $logs"
  [[ -n $msg ]] || die "pod $name has no termination message"
  check '.probe == "sandprobe-cluster-smoke"' "$logs"
  check '.uid == 65532 and .euid == 65532' "$logs"
  check '.rootfs_writable == false' "$logs"
  check '.status.CapEff == "0000000000000000"' "$logs"
  check '.status.NoNewPrivs == "1" or .status.NoNewPrivs == null' "$logs"
  if [[ $rc == runc ]]; then
    # Seccomp 2 = filter mode: the RuntimeDefault profile is applied.
    check '.status.Seccomp == "2"' "$logs"
  else
    # gVisor answers uname with its own kernel, not the host's.
    check ".uname_release != \"$(uname -r)\"" "$logs"
  fi
  if [[ "$(jq -c . <<<"$msg")" == "$(jq -c . <<<"$logs")" ]]; then
    printf '  ok    termination message == stdout\n'
  else
    printf '  FAIL  termination message differs from stdout: %s\n' "$msg"
    fails=$((fails + 1))
  fi
  kc delete pod "$name" --wait=false >/dev/null
done

((fails == 0)) || die "$fails check(s) failed"

t=$(now_ns)
if [[ $keep != 1 ]]; then
  trap - EXIT
  "$cluster_lib_dir/down.sh"
  results+=("$(printf '%-34s %6d ms' "down.sh" "$(ms_since "$t")")")
fi
results+=("$(printf '%-34s %6d ms' "total" "$(ms_since "$t_all")")")
log "smoke test passed"
printf '  %s\n' "${results[@]}"
