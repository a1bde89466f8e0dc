#!/usr/bin/env bash
# The install lifecycle as a user lives it (issue 22 item 5), on a cluster
# make e2e has up: install -> the first Job green -> upgrade to another
# image -> the next Job green -> uninstall -> nothing left. With Helm (the
# chart) or kustomize (kubectl apply -k / delete -k of the e2e overlay).
# Standalone, for hack/e2e.sh to call between its own steps:
#
#   hack/e2e/lifecycle.sh helm|kustomize
#   hack/e2e/lifecycle.sh leftovers    # prints what of sandprobe is installed, if anything
#
# Environment (defaults are hack/e2e.sh's):
#   KUBECONFIG    the cluster's admin kubeconfig (/run/sandprobe-cluster/admin.kubeconfig)
#   KUBECTL       kubectl (hack/k8s/build.sh --print-bin-dir)/kubectl)
#   HELM          helm (hack/helm/build.sh, which builds it if missing)
#   IMAGE         the image installed first, imported, never pulled (sandprobe.local/sandprobe:e2e)
#   IMAGE2        the image upgraded to; import it first (its digest should differ)
#   POLICY        the policy (hack/e2e/overlay/policy.yaml)
#   SANDBOX_NS    the sandbox namespace, which must exist (sandboxes)
#   LIFECYCLE_ENV extra runner environment, NAME=VALUE;... (the e2e cluster's
#                 apiserver and Pushgateway at the node address, as the overlay's cronjob.yaml)
#   OUT           where logs and JUnit go (out/e2e/lifecycle)
#
# The sandprobe install must be absent when it starts (it refuses otherwise)
# and is absent when it ends. Exit 0 when every step held, 1 (naming the
# step) otherwise; it leaves nothing installed either way.
set -euo pipefail
cd "$(dirname "$0")/../.."

tool=${1:-}
[[ $tool == helm || $tool == kustomize || $tool == leftovers ]] || { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
export KUBECONFIG=${KUBECONFIG:-/run/sandprobe-cluster/admin.kubeconfig}
kubectl=${KUBECTL:-$(hack/k8s/build.sh --print-bin-dir)/kubectl}
image=${IMAGE:-sandprobe.local/sandprobe:e2e}
policy=${POLICY:-hack/e2e/overlay/policy.yaml}
sandbox_ns=${SANDBOX_NS:-sandboxes}
extra_env=${LIFECYCLE_ENV:-KUBERNETES_SERVICE_HOST=10.250.0.1;KUBERNETES_SERVICE_PORT=6443;SANDPROBE_PUSHGATEWAY=http://10.250.0.1:19091;SANDPROBE_CLUSTER=e2e}
ns=sandprobe-system

kc() { "$kubectl" "$@"; }
say() { printf '  [%s %(%H:%M:%S)T] %s\n' "$tool" -1 "$*"; }
fail() { printf '  [%s] FAIL: %s\n' "$tool" "$*" >&2; exit 1; }

# leftovers prints every sandprobe object still in the cluster.
leftovers() {
  kc get namespace "$ns" -o name 2>/dev/null || true
  kc get validatingadmissionpolicies,validatingadmissionpolicybindings,clusterroles,clusterrolebindings -o name 2>/dev/null | grep sandprobe || true
  kc -n "$sandbox_ns" get roles,rolebindings -o name 2>/dev/null | grep sandprobe || true
  kc get pods -A -l sandprobe.dev/run -o name 2>/dev/null || true
}
if [[ $tool == leftovers ]]; then leftovers; exit 0; fi
image2=${IMAGE2:?IMAGE2: the image to upgrade to (imported beside IMAGE)}
out=${OUT:-out/e2e/lifecycle}/$tool
mkdir -p "$out"

# nothing_left waits (<= 120 s: namespace deletion) until no object is left.
nothing_left() {
  local left
  for _ in $(seq 120); do
    left=$(leftovers)
    [[ -z $left ]] && return 0
    sleep 1
  done
  fail "left behind after $1: $(echo "$left" | paste -sd ' ')"
}

# green JOB WANT_IMAGE: a Job from the CronJob runs WANT_IMAGE and exits 0.
green() {
  local job=$1 want=$2 got code
  got=$(kc -n "$ns" get cronjob sandprobe -o jsonpath='{.spec.jobTemplate.spec.template.spec.containers[0].image}')
  [[ $got == "$want" ]] || fail "the CronJob runs $got, want $want"
  kc -n "$ns" create job "$job" --from=cronjob/sandprobe >/dev/null
  # Within the Job's activeDeadlineSeconds (20 min): the runner's exit code.
  for _ in $(seq 620); do
    code=$(kc -n "$ns" get pods -l "job-name=$job" -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}' 2>/dev/null || true)
    [[ -n $code ]] && break
    sleep 2
  done
  kc -n "$ns" logs "job/$job" >"$out/$job.log" 2>&1 || true
  [[ $code == 0 ]] || fail "job $job ran $want and exited '${code:-?}', want 0 (log: $out/$job.log)"
  say "job $job: $want, exit 0"
}

# cleanup: whatever happened, uninstall.
cleanup() {
  local code=$?
  if [[ $tool == helm ]]; then
    "$helm" uninstall sandprobe --namespace "$ns" --wait >/dev/null 2>&1 || true
  elif [[ -n ${work:-} ]]; then
    kc delete -k "$work/upgraded" --ignore-not-found --wait=true >/dev/null 2>&1 || true
  fi
  [[ -n ${work:-} ]] && rm -rf "$work"
  exit "$code"
}
trap cleanup EXIT

[[ -z $(leftovers) ]] || fail "sandprobe is already installed: $(leftovers | paste -sd ' ')"
kc get namespace "$sandbox_ns" >/dev/null || fail "the sandbox namespace $sandbox_ns does not exist"
work=$(mktemp -d)

if [[ $tool == helm ]]; then
  hack/helm/build.sh
  helm=${HELM:-$(hack/helm/build.sh --print-bin)}
  set_image() { echo --set "image.repository=${1%:*}" --set "image.tag=${1##*:}" --set image.digest= --set image.pullPolicy=Never; }
  env_args=()
  i=0
  IFS=';' read -ra pairs <<<"$extra_env"
  for kv in "${pairs[@]}"; do
    case ${kv%%=*} in
      SANDPROBE_PUSHGATEWAY) env_args+=(--set pushgateway.enabled=true --set "pushgateway.url=${kv#*=}") ;;
      SANDPROBE_CLUSTER) env_args+=(--set "cluster=${kv#*=}") ;;
      *) env_args+=(--set "extraEnv[$i].name=${kv%%=*}" --set-string "extraEnv[$i].value=${kv#*=}"); i=$((i + 1)) ;;
    esac
  done
  say "helm install ($image)"
  # shellcheck disable=SC2046 # set_image prints flags
  "$helm" install sandprobe charts/sandprobe --namespace "$ns" --create-namespace --wait \
    --set-file "policy=$policy" --set "sandboxNamespaces={$sandbox_ns}" --set output=junit --set suspend=true \
    $(set_image "$image") "${env_args[@]}" >"$out/install.log"
  green lifecycle-installed "$image"
  say "helm upgrade ($image2)"
  # shellcheck disable=SC2046
  "$helm" upgrade sandprobe charts/sandprobe --namespace "$ns" --reuse-values --wait $(set_image "$image2") >"$out/upgrade.log"
  green lifecycle-upgraded "$image2"
  say "helm uninstall"
  "$helm" uninstall sandprobe --namespace "$ns" --wait >"$out/uninstall.log"
  # The release namespace stays, as every --create-namespace one does
  # (Helm's record lived there): it must be empty, then the user deletes it.
  # The Jobs' pods go a moment later (the garbage collector follows the
  # CronJob's deletion to its Jobs, then their pods).
  for _ in $(seq 60); do
    left=$(kc -n "$ns" get all,configmaps,secrets,roles,rolebindings,serviceaccounts -o name 2>&1 | grep -v -e '^configmap/kube-root-ca.crt$' -e '^serviceaccount/default$' || true)
    [[ -z $left ]] && break
    sleep 1
  done
  [[ -z $left ]] || fail "left in $ns after helm uninstall: $(echo "$left" | paste -sd ' ')"
  say "helm uninstall: $ns is empty; kubectl delete namespace $ns"
  kc delete namespace "$ns" --wait=true >>"$out/uninstall.log"
  nothing_left "helm uninstall"
else
  # A bare install, as on a vanilla cluster: the base with only the
  # sandbox-namespaces component, the e2e policy, the image and what this
  # cluster needs (the apiserver at the node address, no registry); no
  # Prometheus Operator CRD (deleted first) and no Pushgateway: the first
  # Job must still exit 0. Then one more overlay over it that moves the
  # image: the user's upgrade is a changed images: entry.
  rel() { realpath -m --relative-to="$2" "$1"; }
  mkdir -p "$work/installed" "$work/upgraded"
  cp "$policy" "$work/installed/policy.yaml"
  cp hack/e2e/overlay/admission.yaml "$work/installed/admission.yaml"
  {
    echo "apiVersion: batch/v1"
    echo "kind: CronJob"
    echo "metadata: {name: sandprobe, namespace: $ns}"
    echo "spec:"
    echo "  suspend: true"
    echo "  jobTemplate: {spec: {template: {spec: {containers: [{name: sandprobe, imagePullPolicy: Never, env: ["
    echo "    {name: SANDPROBE_OUTPUT, value: junit},"
    IFS=';' read -ra pairs <<<"$extra_env"
    for kv in "${pairs[@]}"; do
      [[ ${kv%%=*} == SANDPROBE_PUSHGATEWAY ]] && continue
      echo "    {name: ${kv%%=*}, value: \"${kv#*=}\"},"
    done
    echo "  ]}]}}}}"
  } >"$work/installed/cronjob.yaml"
  cat >"$work/installed/kustomization.yaml" <<YAML
resources: [$(rel manifests "$work/installed")]
components: [$(rel manifests/components/sandbox-namespaces "$work/installed")]
configMapGenerator:
  - {name: sandprobe-policy, namespace: $ns, behavior: replace, files: [policy.yaml], options: {disableNameSuffixHash: true, labels: {app.kubernetes.io/managed-by: sandprobe, sandprobe.dev/policy: e2e-sandbox}}}
images:
  - {name: ghcr.io/sandprobe/sandprobe, newName: ${image%:*}, newTag: ${image##*:}}
patches: [{path: admission.yaml}, {path: cronjob.yaml}]
YAML
  printf 'resources: [../installed]\nimages:\n  - {name: %s, newName: %s, newTag: %s}\n' \
    "${image%:*}" "${image2%:*}" "${image2##*:}" >"$work/upgraded/kustomization.yaml"
  kc delete -f hack/e2e/crds/ --ignore-not-found --wait=true >/dev/null
  kc get crd prometheusrules.monitoring.coreos.com >/dev/null 2>&1 && fail "the Prometheus Operator's CRD is still there"
  say "kubectl apply -k ($image; no Prometheus Operator, no Pushgateway)"
  kc apply -k "$work/installed" >"$out/install.log"
  green lifecycle-installed "$image"
  say "kubectl apply -k ($image2)"
  kc apply -k "$work/upgraded" >"$out/upgrade.log"
  green lifecycle-upgraded "$image2"
  say "kubectl delete -k"
  kc delete -k "$work/upgraded" --wait=true >"$out/uninstall.log"
  nothing_left "kubectl delete -k"
fi
say "install -> green -> upgrade -> green -> uninstall -> nothing left"
