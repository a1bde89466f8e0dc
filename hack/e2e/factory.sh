# shellcheck shell=bash
# shellcheck disable=SC2154 # out, node_ip, sandbox_ns, netpol: hack/e2e.sh sets them before it sources this
# hack/e2e/factory.sh — sourced by hack/e2e.sh after the healthy run, with
# its variables and hack/e2e/lib.sh's functions: the neighbours (issue 24
# item 4) on the real cluster. The kubelet listens on the node address
# (10250), which the cluster's safety net lets pods reach: only the
# NetworkPolicy sandprobe renders keeps a sandbox from it.
#   1. the healthy run proved the kubelet deny: the control pod reached
#      the kubelet, the probe did not (kube-router's REJECT, in INPUT);
#   2. an additive NetworkPolicy with an ipBlock for the node address "for
#      the node-local cache" is caught by the next run, naming the port,
#      and drift names the policy; green again once it is deleted.

step "the neighbours" "the healthy run dialled its node's kubelet (10250) and the API server's address, denied and proven"
grep -F 'node:10250 (kubelet)' "$out/sandprobe-healthy.enforcers" | quote
grep -F 'node:10250 (kubelet)' "$out/sandprobe-healthy.enforcers" | grep -qF "kube-router" \
  || fail "the healthy run did not prove the kubelet deny (no node:10250 row enforced by kube-router in $out/sandprobe-healthy.enforcers)"
grep -E 'node:|kubernetes API' "$out/sandprobe-healthy.enforcers" | grep -v 'node:10250' | quote
ok "the kubelet on $node_ip:10250 answers the control pod and not the sandbox"

step "regression 5: the node address allowed" "an additive NetworkPolicy with an ipBlock for $node_ip/32 (the node-local cache, 'for a minute')"
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
expect_caught sandprobe-node-address 'node:10250' networkpolicy/allow-node-for-a-minute
kc -n "$sandbox_ns" delete networkpolicy allow-node-for-a-minute | quote
until_kr "allow-node-for-a-minute gone from $sandbox_ns" not "$netpol" has-policy "$sandbox_ns" allow-node-for-a-minute
step "undone" "the ipBlock for the node address is deleted"
expect_green sandprobe-node-address-undone
