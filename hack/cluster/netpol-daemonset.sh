# shellcheck shell=bash
# shellcheck disable=SC2154 # KR_*, CACHE, LOGS: netpol.sh and lib.sh set them before sourcing this
# hack/cluster/netpol-daemonset.sh — sourced by netpol.sh: kube-router as a
# DaemonSet (`netpol.sh up --daemonset`, `manifest`), the way clusters run
# their CNI agent: its image, its manifest, bringing it up and down.
# image_ref: the DaemonSet's image, named by its content (the cached binary
# and the rules script): a rebuilt binary is a new image.
image_ref() { echo "sandprobe.local/kube-router:$KR_VERSION-$(cat "$KR_BIN" "$KR_RULES" | sha256sum | cut -c1-12)"; }

# ensure_image: import the DaemonSet's image unless containerd has it. It
# holds the cached kube-router binary and kube-router-rules.sh; iptables,
# ipset and the shell come from the host's /usr, mounted read-only (the
# same userland the host mode runs: one nf_tables backend, one xtables
# lock), so the image carries no second copy of them.
ensure_image() {
  local ref root
  ref=$(image_ref)
  if ctrc images ls -q 2>/dev/null | grep -Fx "$ref" >/dev/null; then return 0; fi
  root=$(mktemp -d)
  mkdir -p "$root"/{usr,etc/alternatives,dev,proc,sys,tmp,run,var/run}
  ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  touch "$root/etc/hosts" "$root/etc/resolv.conf" "$root/etc/hostname"
  chmod 1777 "$root/tmp"
  install -m 0755 "$KR_BIN" "$root/kube-router"
  install -m 0644 "$KR_RULES" "$root/kube-router-rules.sh"
  "$cluster_lib_dir/import-image.sh" "$ref" "$root" /kube-router >/dev/null || { rm -rf "$root"; die "import-image.sh $ref failed"; }
  rm -rf "$root"
  log "imported $ref"
}

# manifest [--firewall-off]: the DaemonSet (and its ServiceAccount and
# RBAC). The healthy template runs kube-router exactly as the host mode
# does, with the in-cluster config: its ServiceAccount's token, the API
# server at the node address (no kube-proxy here, so not the Service IP).
# --firewall-off is the template of a CNI upgrade gone wrong: the agent pod
# comes up Running and Ready, its rules are gone and nothing programs new
# ones. (kube-router itself, with its firewall off and no other controller,
# exits at once, a crash loop the watcher would also see; the silent case
# is an agent that stays up. So this container removes exactly
# kube-router's chains, jumps and ipsets, with kube-router-rules.sh, and
# then waits, as an agent whose other controllers run would.)
# shellcheck disable=SC2120 # netpol.sh's `manifest [--firewall-off]` passes them
manifest() {
  local mode=healthy cmd args=""
  [[ ${1:-} == --firewall-off ]] && mode=firewall-off
  if [[ $mode == healthy ]]; then
    cmd='[/kube-router]'
    # shellcheck disable=SC2016 # $(NODE_NAME) is for Kubernetes to expand, not the shell
    args=$(printf '"%s", ' "${KR_FLAGS[@]}" '--hostname-override=$(NODE_NAME)')
    args="args: [${args%, }]"
  else
    cmd='[/bin/bash, -c, ". /kube-router-rules.sh; remove_rules; echo \"firewall off: kube-router rules removed, enforcing nothing\"; trap \"exit 0\" TERM; while :; do sleep 1 & wait $!; done"]'
  fi
  cat <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: $KR_DS, namespace: $KR_DS_NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "sandprobe-test:$KR_DS"}
rules:
  # What its network-policy controller watches (its informers), nothing more.
  - {apiGroups: [""], resources: [namespaces, pods, nodes, services, endpoints], verbs: [get, list, watch]}
  - {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [get, list, watch]}
  - {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}
  - {apiGroups: ["", events.k8s.io], resources: [events], verbs: [create, patch, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "sandprobe-test:$KR_DS"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "sandprobe-test:$KR_DS"}
subjects: [{kind: ServiceAccount, name: $KR_DS, namespace: $KR_DS_NS}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: $KR_DS
  namespace: $KR_DS_NS
  labels: {app.kubernetes.io/name: kube-router, app.kubernetes.io/part-of: sandprobe-test}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: kube-router}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: kube-router}
      annotations: {sandprobe.dev/kube-router-template: $mode}
    spec:
      serviceAccountName: $KR_DS
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations: [{operator: Exists}]
      terminationGracePeriodSeconds: 10
      containers:
        - name: kube-router
          image: $(image_ref)
          imagePullPolicy: Never
          command: $cmd
          $args
          env:
            - {name: KUBERNETES_SERVICE_HOST, value: "$NODE_IP"}
            - {name: KUBERNETES_SERVICE_PORT, value: "$APISERVER_PORT"}
            - name: NODE_NAME
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
          securityContext: {privileged: true}
          # As upstream's DaemonSet requests: without a request the agent is
          # BestEffort (cpu.shares 2) and, on a loaded node, programs a new
          # pod's firewall seconds late; the probe then dials first.
          resources: {requests: {cpu: 250m, memory: 250Mi}}
          volumeMounts:
            - {name: host-usr, mountPath: /usr, readOnly: true}
            - {name: host-alternatives, mountPath: /etc/alternatives, readOnly: true}
            - {name: xtables-lock, mountPath: /run/xtables.lock}
      volumes:
        - {name: host-usr, hostPath: {path: /usr, type: Directory}}
        - {name: host-alternatives, hostPath: {path: /etc/alternatives, type: Directory}}
        - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
YAML
}

up_daemonset() {
  require_root
  command -v ipset >/dev/null || die "ipset is missing (make deps: hack/install-deps.sh)"
  command -v iptables >/dev/null || die "iptables is missing (make deps: hack/install-deps.sh)"
  api_up || die "the cluster is not up (no API server at $KUBECONFIG_ADMIN): run hack/cluster/up.sh"
  build
  if pid_alive kube-router; then
    log "switching from the host process to the DaemonSet"
    stop_pid kube-router 10
  fi
  local t; t=$(now_ns)
  # A first start must not mistake a killed kube-router's rules for its
  # work; under a running DaemonSet, the rules are its own.
  ds_exists || remove_rules
  ensure_image
  # shellcheck disable=SC2119 # the default template: no argument
  manifest | kc apply -f - >/dev/null
  if ! kc -n "$KR_DS_NS" rollout status "daemonset/$KR_DS" --timeout=90s >/dev/null || ! wait_for "kube-router to enforce" 60 enforcing; then
    kc -n "$KR_DS_NS" get pods -l app.kubernetes.io/name=kube-router -o wide >&2 || true
    kc -n "$KR_DS_NS" logs -l app.kubernetes.io/name=kube-router --tail=30 >&2 || true
    die "the kube-router DaemonSet did not start enforcing"
  fi
  log "kube-router $KR_VERSION enforcing as DaemonSet $KR_DS_NS/$KR_DS in $(ms_since "$t") ms (pod $(ds_pods | tr '\n' ' '))"
}

# ds_pods: the DaemonSet's pods, one a line (name and phase).
ds_pods() { kc -n "$KR_DS_NS" get pods -l app.kubernetes.io/name=kube-router -o jsonpath='{range .items[*]}{.metadata.name}:{.status.phase}{"\n"}{end}' 2>/dev/null || true; }

# down_daemonset: delete the DaemonSet and its RBAC, and wait until its
# pods are gone (their kube-router has exited).
down_daemonset() {
  api_up || return 0
  # (One request when there is nothing to delete: the host mode's down and
  # up pass here too.)
  if ! ds_exists; then
    kc -n "$KR_DS_NS" get serviceaccount "$KR_DS" >/dev/null 2>&1 || return 0
  else
    log "deleting the kube-router DaemonSet"
  fi
  kc -n "$KR_DS_NS" delete daemonset "$KR_DS" --ignore-not-found --wait=true --timeout=60s >/dev/null || log "warning: deleting daemonset $KR_DS_NS/$KR_DS timed out"
  kc -n "$KR_DS_NS" delete pods -l app.kubernetes.io/name=kube-router --ignore-not-found --wait=true --timeout=60s >/dev/null || true
  kc -n "$KR_DS_NS" delete serviceaccount "$KR_DS" --ignore-not-found >/dev/null || true
  kc delete clusterrolebinding,clusterrole "sandprobe-test:$KR_DS" --ignore-not-found >/dev/null || true
}
