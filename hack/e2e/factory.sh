# shellcheck shell=bash
# shellcheck disable=SC2154 # out, ns, node_ip, sandbox_ns, netpol, lab, bin, egress_np: hack/e2e.sh sets them before it sources this
# hack/e2e/factory.sh — sourced by hack/e2e.sh, with its variables and
# hack/e2e/lib.sh's functions (issue 24: the factory as it is really built).
#
# neighbours_proved, after the healthy run: the kubelet listens on the node
# address (10250), which the cluster's safety net lets pods reach; only the
# NetworkPolicy sandprobe renders keeps a sandbox from it, and the healthy
# run proved that deny (the control pod reached the kubelet, the probe did
# not: kube-router's REJECT, in INPUT).
#
# factory_story, after the lab policy's regressions: the factory's own
# topology — no forward proxy; two brokers as nginx pods in namespace
# factory behind headless Services, whose names the cluster's DNS answers;
# the package hosts reached directly, allowed by address
# (hack/e2e/factory-policy.yaml). The CronJob's policy and the sandbox
# namespace's NetworkPolicy are swapped for the factory's, then:
#   healthy → green (brokers answer, every deny proven);
#   an additive allow-all "for a minute" → caught, drift names it;
#   a broker's podSelector typo → the broker no longer answers, drift names
#     the NetworkPolicy;
#   an ipBlock for the node address ("the node-local cache") → caught naming
#     the kubelet's port, drift names the policy;
# green again after each undo; then the lab policy's NetworkPolicy is back.

factory_policy=hack/e2e/factory-policy.yaml
broker_image=sandprobe.local/broker:e2e

neighbours_proved() {
  step "the neighbours" "the healthy run dialled its node's kubelet (10250) and the API server's address, denied and proven"
  grep -F 'node:10250 (kubelet)' "$out/sandprobe-healthy.enforcers" | quote
  grep -F 'node:10250 (kubelet)' "$out/sandprobe-healthy.enforcers" | grep -qF "kube-router" \
    || fail "the healthy run did not prove the kubelet deny (no node:10250 row enforced by kube-router in $out/sandprobe-healthy.enforcers)"
  grep -E 'node:|kubernetes API' "$out/sandprobe-healthy.enforcers" | grep -v 'node:10250' | quote
  ok "the kubelet on $node_ip:10250 answers the control pod and not the sandbox"
}

# broker_rootfs DIR: the machine's nginx (Debian's) with the libraries it
# links, and a configuration that answers every request on 8080, as the
# factory's brokers (nginx in front of the credentials) do.
broker_rootfs() {
  local root=$1 lib
  mkdir -p "$root/usr/sbin" "$root/etc/nginx" "$root/tmp"
  cp /usr/sbin/nginx "$root/usr/sbin/"
  for lib in $(ldd /usr/sbin/nginx | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  cat >"$root/etc/nginx/broker.conf" <<'CONF'
pid /tmp/nginx.pid;
error_log stderr;
worker_processes 1;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path /tmp/body; proxy_temp_path /tmp/proxy; fastcgi_temp_path /tmp/fastcgi;
  uwsgi_temp_path /tmp/uwsgi; scgi_temp_path /tmp/scgi;
  server {
    listen 8080;
    default_type text/plain;
    location / { return 200 "broker $hostname: the credentials stay here\n"; }
  }
}
CONF
}

# brokers: the namespace, one nginx pod and one headless Service per broker.
brokers() {
  local b
  printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: factory, labels: {pod-security.kubernetes.io/enforce: restricted}}\n'
  for b in model-broker git-broker; do
    cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: $b, namespace: factory, labels: {app: $b}}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: nginx
      image: $broker_image
      imagePullPolicy: Never
      ports: [{containerPort: 8080}]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: tmp, mountPath: /tmp}]
  volumes: [{name: tmp, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: $b, namespace: factory}
spec: {clusterIP: None, selector: {app: $b}, ports: [{port: 8080}]}
YAML
  done
}

# allow_all NS NOTE: the additive NetworkPolicy "for a minute" that allows
# 0.0.0.0/0 to every pod of NS (regressions 1 and 5), annotated with NOTE.
allow_all() {
  kc apply -f - <<YAML | quote
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-egress-for-a-minute, namespace: $1, annotations: {note: "$2"}}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{to: [{ipBlock: {cidr: 0.0.0.0/0}}]}]
YAML
}

# in_ipsets IP: kube-router has IP in one of its sets (a peer a policy allows).
in_ipsets() { ipset list -o save 2>/dev/null | grep -qE "^add [^ ]+ $1( |$)"; }
factory_netpol() { "$bin" render --policy "$factory_policy" --namespace "$sandbox_ns" --format egress --egress networkpolicy; }

# expect_unreachable JOB HOST DRIFT_OBJECT: the run is not conformant
# because the allowed HOST did not answer, and drift names DRIFT_OBJECT.
expect_unreachable() {
  local job=$1 host=$2 obj=$3
  run_failing "$job"
  say "JUnit failures:"
  junit_failures "$out/$job.xml" | quote
  junit_failures "$out/$job.xml" | grep -F "$host" | grep -q "egress.allowed" || fail "$job's JUnit does not name $host as an allowed host that did not answer"
  [[ $(metric sandprobe_egress_allowed_unreachable "$out/$job.prom") -gt 0 ]] || fail "sandprobe_egress_allowed_unreachable is not > 0 in $job"
  grep -q "$obj" "$out/$job.xml" || fail "$job's drift does not name $obj"
  ok "${red}not conformant${reset}: exit 1, $host does not answer, and drift names $obj"
}

# start_brokers: the broker image, pods and Services, and their names in
# the cluster's DNS; sets model_ip and git_ip.
start_brokers() {
  local rootfs
  rootfs=$(mktemp -d)
  broker_rootfs "$rootfs"
  hack/cluster/import-image.sh "$broker_image" "$rootfs" /usr/sbin/nginx -e stderr -c /etc/nginx/broker.conf -g 'daemon off;' 2>&1 | quote
  rm -rf "$rootfs"
  brokers | kc apply -f - | quote
  kc -n factory wait --for=condition=Ready pod/model-broker pod/git-broker --timeout=120s >/dev/null || fail "the brokers did not become Ready"
  model_ip=$(kc -n factory get pod model-broker -o jsonpath='{.status.podIP}')
  git_ip=$(kc -n factory get pod git-broker -o jsonpath='{.status.podIP}')
  "$lab" cluster-dns "model-broker.factory.svc.cluster.local=$model_ip" "git-broker.factory.svc.cluster.local=$git_ip" 2>&1 | quote
}

# cronjob_policy FILE: the CronJob's policy (its ConfigMap) becomes FILE.
cronjob_policy() {
  kc -n "$ns" create configmap sandprobe-policy --from-file=policy.yaml="$1" --dry-run=client -o yaml |
    kc label --local -f - app.kubernetes.io/managed-by=sandprobe sandprobe.dev/policy=e2e-sandbox -o yaml | kc apply -f - | quote
}

factory_story() {
  local model_ip git_ip
  step "the factory" "no proxy: brokers as nginx pods in namespace factory (headless Services, names answered by the cluster's DNS), package hosts reached directly"
  start_brokers
  cronjob_policy "$factory_policy"
  factory_netpol | kc apply -f - | quote
  until_kr "the factory's NetworkPolicy (brokers at $model_ip, $git_ip; 10.99.10.10 by address)" \
    eval "in_ipsets $model_ip && in_ipsets $git_ip && in_ipsets 10.99.10.10"
  ok "brokers up, the cluster's DNS answers their names, the CronJob's policy and the sandboxes' NetworkPolicy are the factory's"

  step "healthy run (the factory)" "a Job from the CronJob: the brokers and the package hosts answer directly, every deny proven"
  expect_green sandprobe-factory-healthy
  sed -n 's/.*<testcase name="\(egress.allowed [^"]*\)".*/\1: pass/p' "$out/sandprobe-factory-healthy.xml" | quote

  step "regression 5: an allow-all 'for a minute' (the factory)" "an additive NetworkPolicy allowing 0.0.0.0/0 in the sandbox namespace"
  allow_all "$sandbox_ns" "debugging a package mirror, remove after"
  until_kr "allow-egress-for-a-minute in $sandbox_ns" "$netpol" has-policy "$sandbox_ns" allow-egress-for-a-minute
  expect_caught sandprobe-factory-widened blocked.lab.test networkpolicy/allow-egress-for-a-minute
  kc -n "$sandbox_ns" delete networkpolicy allow-egress-for-a-minute | quote
  until_kr "allow-egress-for-a-minute gone from $sandbox_ns" not "$netpol" has-policy "$sandbox_ns" allow-egress-for-a-minute
  step "undone" "the allow-all is deleted"
  expect_green sandprobe-factory-widened-undone

  step "regression 6: a broker's podSelector typo" "the NetworkPolicy's model-broker peer selects app=model-brokr"
  kc -n "$sandbox_ns" get networkpolicy "$egress_np" -o json |
    jq '(.spec.egress[].to[]? | select(.podSelector.matchLabels.app == "model-broker") | .podSelector.matchLabels.app) = "model-brokr"' |
    kc apply -f - | quote
  until_kr "no policy allows model-broker ($model_ip) any more" not in_ipsets "$model_ip"
  say "${red}patched${reset} — the rule is still there and reads right at a glance; it selects no broker"
  expect_unreachable sandprobe-factory-typo model-broker "networkpolicy/$egress_np"
  factory_netpol | kc apply -f - | quote
  until_kr "model-broker ($model_ip) allowed again" in_ipsets "$model_ip"
  step "undone" "the rendered NetworkPolicy is applied again"
  expect_green sandprobe-factory-typo-undone

  step "regression 7: the node address allowed (the factory)" "an additive NetworkPolicy with an ipBlock for $node_ip/32 (the node-local cache, 'for a minute')"
  kc apply -f - <<YAML | quote
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-node-for-a-minute, namespace: $sandbox_ns, annotations: {note: "the node-local package cache, remove after"}}
spec:
  podSelector: {matchLabels: {sandbox: "true"}}
  policyTypes: [Egress]
  egress: [{to: [{ipBlock: {cidr: $node_ip/32}}]}]
YAML
  until_kr "allow-node-for-a-minute in $sandbox_ns" "$netpol" has-policy "$sandbox_ns" allow-node-for-a-minute
  say "${red}applied${reset} — every port of the node is open to the sandboxes: the kubelet's API among them"
  expect_caught sandprobe-factory-node-address 'node:10250' networkpolicy/allow-node-for-a-minute
  kc -n "$sandbox_ns" delete networkpolicy allow-node-for-a-minute | quote
  until_kr "allow-node-for-a-minute gone from $sandbox_ns" not "$netpol" has-policy "$sandbox_ns" allow-node-for-a-minute
  step "undone" "the ipBlock for the node address is deleted"
  expect_green sandprobe-factory-node-address-undone

  # Back to the lab's policy for what follows (the install lifecycle).
  render_netpol "$sandbox_ns" | kc apply -f - | quote
  until_kr "the lab policy's NetworkPolicy again (10.99.10.10 no longer allowed directly)" not in_ipsets 10.99.10.10
  kc delete namespace factory --wait=false | quote
  "$lab" cluster-dns 2>&1 | quote
}
