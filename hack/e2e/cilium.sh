# shellcheck shell=bash
# shellcheck disable=SC2154 # out, ns, bin, e2etool, sandbox_ns, lab, egress_np, cni: hack/e2e.sh sets them before it sources this
# shellcheck disable=SC2034 # engine, engine_what, blocked_by, isolation_args, netpol: hack/e2e.sh and lib.sh read them
# hack/e2e/cilium.sh — sourced by hack/e2e.sh when CNI=cilium (issue 28), with
# its variables and hack/e2e/lib.sh's and factory.sh's functions.
#
# The cluster's CNI is a real Cilium agent (hack/cluster/cilium.sh) and the
# only thing between a sandbox and the lab is the CiliumNetworkPolicy
# `sandprobe render --egress cilium` writes from hack/e2e/cilium-policy.yaml
# (the factory's policy with its package hosts by name); the lab resolver
# forwards every name (`lab break dns-open`), so what refuses a name is
# Cilium's DNS proxy. cilium_story:
#   healthy → green, each verdict attributed to Cilium's drop or DNS refusal;
#   1. an additive CNP with toEntities: world "for a minute" → caught;
#   2. the DNS rule widened to matchPattern "*" → caught (names resolve);
#   3. the apex of *.git.lab.test allowed (the *.nuget.org case) → caught;
#   4. the agent restarted with --enable-policy=never → caught, no spec changed;
#   5. a sandbox without its label → caught where it stands;
# green again after each undo.

# The engine, as hack/e2e.sh's CNI picks it: the script that runs it (the
# same subcommands as hack/cluster/netpol.sh), its name in the output, and
# what a green run says blocked the denies.
isolation_args=()
case $cni in
  kube-router)
    engine=kube-router engine_what="kube-router's network-policy controller, firewall only, beside the bridge CNI"
    blocked_by="kube-router's NetworkPolicy or the proxy's deny" ;;
  cilium)
    engine=Cilium netpol=hack/cluster/cilium.sh
    engine_what="Cilium v1.20.2 as the CNI: native routing, no kube-proxy replacement, no operator, Hubble or Envoy"
    blocked_by="Cilium's CiliumNetworkPolicy and its DNS proxy"
    isolation_args=(--pods-only) ;; # pods are on lxc devices, not the bridge
  *) echo "e2e: CNI=$cni: want kube-router or cilium" >&2; exit 2 ;;
esac

# cilium_lab: under Cilium the lab's resolver forwards every name, as a
# plain CoreDNS does: what refuses a name is Cilium's DNS proxy.
cilium_lab() {
  [[ $cni == cilium ]] || return 0
  "$lab" break dns-open >>"$out/lab.log" 2>&1 || fail "lab break dns-open failed"
}

# cilium_events_start JOB / cilium_events_stop: under Cilium, the agent's
# own account of a run (drops and DNS-proxy verdicts) in $out/JOB.cilium.json.
events_pid=''
cilium_events_start() {
  [[ $cni == cilium ]] || return 0
  "$netpol" drops >"$out/$1.cilium.json" 2>&1 &
  events_pid=$!
  sleep 1
}
cilium_events_stop() {
  [[ -n $events_pid ]] || return 0
  kill "$events_pid" 2>/dev/null; wait "$events_pid" 2>/dev/null || true
  events_pid=''
}

# cilium_e2e: the Cilium story, then the end of the run.
cilium_e2e() {
  cilium_story
  end_step
  printf '\n%se2e (CNI=cilium): passed%s — reports, logs and metrics in %s\n' "$green" "$reset" "$out"
  exit 0
}

cilium_policy=hack/e2e/cilium-policy.yaml
render_cnp() { "$bin" render --policy "$cilium_policy" --namespace "$sandbox_ns" --format egress --egress cilium; }
# restore_cnp: the rendered CNP again, in place of an edited one (replace at
# the live resourceVersion: a client-side apply over the edit was refused
# with "metadata.resourceVersion: Invalid value: 0: must be specified for
# an update").
restore_cnp() {
  local rv; rv=$(kc -n "$sandbox_ns" get ciliumnetworkpolicy "$egress_np" -o jsonpath='{.metadata.resourceVersion}')
  render_cnp | kc create --dry-run=client -o json -f - | jq --arg rv "$rv" '.metadata.resourceVersion = $rv' | kc replace -f - | quote
}

# in_force WHAT: wait until the agent has computed and applied the last
# policy change to every endpoint (hack/cluster/cilium.sh synced).
in_force() { until_kr "$1" "$netpol" synced; }

# expect_failed JOB CHECK [DRIFT_OBJECT]: not conformant, and a failure of
# the JUnit names CHECK (e.g. egress.dns-exfil).
expect_failed() {
  local job=$1 check=$2 obj=${3:-}
  run_failing "$job"
  say "JUnit failures:"
  junit_failures "$out/$job.xml" | quote
  junit_failures "$out/$job.xml" | grep -F "$check" >/dev/null || fail "$job's JUnit has no failure of $check"
  if [[ -n $obj ]]; then grep -q "$obj" "$out/$job.xml" || fail "$job's drift does not name $obj"; fi
  enforcers "$job" || true
  say "who enforced each verdict (or nobody):"
  grep -E 'FAIL|enforced by' "$out/$job.enforcers" | quote
  ok "${red}not conformant${reset}: exit 1, and the reports name $check"
}

# cilium_view NAME [differ]: drift's reading of the live objects against
# the agent's own view of every endpoint (e2etool cilium-view: egress
# enforced or not, the policies its rules come from, its toFQDNs
# selectors). They must agree within 5 s (the agent regenerates endpoints
# on its own time); with "differ", they must differ, as when the agent
# stops enforcing with no spec changed.
cilium_view() {
  local f=$out/view-$1 rc
  for _ in $(seq 25); do
    kc get namespaces,pods,networkpolicies,ciliumnetworkpolicies,ciliumclusterwidenetworkpolicies -A -o json >"$f.objects.json" || fail "kubectl get for cilium-view failed"
    "$netpol" endpoints >"$f.endpoints.json" || fail "cilium.sh endpoints failed"
    rc=0; "$e2etool" cilium-view --policy "$cilium_policy" --objects "$f.objects.json" --endpoints "$f.endpoints.json" >"$f.txt" 2>&1 || rc=$?
    [[ $rc == 0 || ${2:-} == differ ]] && break
    sleep 0.2
  done
  say "drift's reading against Cilium's own view of each endpoint:"
  quote <"$f.txt"
  case ${2:-agree}:$rc in
    agree:0) ok "drift reads the policies as the agent enforces them, on every endpoint" ;;
    differ:1) grep -q "^DIFF $sandbox_ns/agent-1: drift reads egress enforced .*the agent: egress not enforced" "$f.txt" || fail "cilium-view: no difference in agent-1's enforcement ($f.txt)"
      ok "drift's reading and the agent's view differ: Cilium does not enforce what its specs say" ;;
    *) fail "cilium-view exited $rc, want ${2:-agree} ($f.txt)" ;;
  esac
}

# patch_cnp JQ: the rendered CNP in the sandbox namespace, edited by JQ
patch_cnp() {
  kc -n "$sandbox_ns" get ciliumnetworkpolicy "$egress_np" -o json | jq "$1" | kc replace -f - | quote
}

cilium_story() {
  local model_ip git_ip
  step "the factory under Cilium" "brokers as nginx pods in namespace factory, package hosts by name, the CronJob's policy $cilium_policy"
  start_brokers
  cronjob_policy "$cilium_policy"
  "$bin" render --policy "$cilium_policy" --namespace "$sandbox_ns" --name agent-1 --egress cilium | "$e2etool" sandbox >"$out/sandbox.yaml"
  kc apply -f "$out/sandbox.yaml" | quote
  kc -n "$sandbox_ns" wait --for=condition=Ready pod/agent-1 --timeout=120s >/dev/null || fail "the sandbox pod did not become Ready"
  until_kr "$egress_np restricts the live sandbox agent-1" "$netpol" enforced "$sandbox_ns" agent-1
  until_kr "$egress_np imported by the agent" "$netpol" has-policy "$sandbox_ns" "$egress_np"
  kc -n "$sandbox_ns" get ciliumnetworkpolicy "$egress_np" -o json |
    jq -r '"\(.metadata.name): endpointSelector \(.spec.endpointSelector.matchLabels), \(.spec.egress | length) egress rules, DNS names: \([.spec.egress[].toPorts[]?.rules.dns[]? | .matchName // .matchPattern] | join(" "))"' | fold -w 110 | quote
  ok "brokers at $model_ip, $git_ip; Cilium enforces $egress_np on agent-1"
  cilium_view healthy

  step "healthy run (Cilium)" "a Job from the CronJob: brokers and package hosts by name answer, every deny proven"
  expect_green sandprobe-cilium-healthy
  sed -n 's/.*<testcase name="\(egress.allowed [^"]*\)".*/\1: pass/p' "$out/sandprobe-cilium-healthy.xml" | quote

  step "regression 1: toEntities world 'for a minute'" "an additive CiliumNetworkPolicy allowing the world to every pod of $sandbox_ns"
  kc apply -f - <<YAML | quote
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: allow-world-for-a-minute, namespace: $sandbox_ns, annotations: {note: "debugging a package mirror, remove after"}}
spec:
  endpointSelector: {}
  egress: [{toEntities: [world]}]
YAML
  until_kr "allow-world-for-a-minute imported" "$netpol" has-policy "$sandbox_ns" allow-world-for-a-minute
  in_force "allow-world-for-a-minute in force"
  cilium_view world
  expect_caught sandprobe-cilium-world 10.99.20.10 "ciliumnetworkpolicy/$sandbox_ns/allow-world-for-a-minute"
  kc -n "$sandbox_ns" delete ciliumnetworkpolicy allow-world-for-a-minute | quote
  until_kr "allow-world-for-a-minute gone" not "$netpol" has-policy "$sandbox_ns" allow-world-for-a-minute
  in_force "the deletion in force"
  step "undone" "the CNP is deleted"
  expect_green sandprobe-cilium-world-undone

  step "regression 2: every name through the DNS proxy" "the DNS rule of $egress_np becomes matchPattern \"*\""
  patch_cnp '(.spec.egress[] | select(.toPorts[0].rules.dns != null) | .toPorts[0].rules.dns) = [{"matchPattern": "*"}]'
  in_force "the DNS rule matchPattern \"*\" in force"
  say "${red}patched${reset} — addresses are still closed; names are not: the resolver answers every name, a query carries data out"
  expect_failed sandprobe-cilium-dns-star egress.dns-exfil drift.cilium.dns-names # drift judges it as the probe does
  restore_cnp
  in_force "the rendered DNS rule again"
  step "undone" "the rendered CNP is applied again"
  expect_green sandprobe-cilium-dns-star-undone

  step "regression 3: the apex of *.git.lab.test" "git.lab.test added to the DNS rule and the *.git.lab.test rule (the *.nuget.org fix that opens nuget.org)"
  patch_cnp '(.spec.egress[] | select(.toPorts[0].rules.dns != null) | .toPorts[0].rules.dns) += [{"matchName": "git.lab.test"}]
    | (.spec.egress[] | select(.toFQDNs[0].matchPattern? == "*.git.lab.test") | .toFQDNs) += [{"matchName": "git.lab.test"}]'
  in_force "git.lab.test allowed"
  cilium_view apex
  expect_caught sandprobe-cilium-apex git.lab.test drift.cilium.fqdn-extra # drift judges the apex as the probe does
  restore_cnp
  in_force "the rendered CNP again"
  step "undone" "the rendered CNP is applied again"
  expect_green sandprobe-cilium-apex-undone

  step "regression 4: a CNI upgrade" "the agent restarted with --enable-policy=never; no object changes"
  "$netpol" restart --enable-policy=never >>"$out/netpol.log" 2>&1 {cl}>&- {ll}>&- || fail "cilium.sh restart failed"
  "$netpol" status | sed -n 1p | quote
  until_kr "agent-1 no longer enforced" not "$netpol" enforced "$sandbox_ns" agent-1
  say "${red}not enforcing${reset} — every CiliumNetworkPolicy is still in the API, exactly as before"
  cilium_view never differ
  expect_caught sandprobe-cilium-never 10.99.20.10 -
  "$netpol" restart >>"$out/netpol.log" 2>&1 {cl}>&- {ll}>&- || fail "cilium.sh restart failed"
  until_kr "$egress_np restricts agent-1 again" "$netpol" enforced "$sandbox_ns" agent-1
  "$netpol" status | sed -n 1p | quote
  step "undone" "the agent enforces again"
  expect_green sandprobe-cilium-never-undone

  step "regression 5: a sandbox without its label" "agent-2 starts in $sandbox_ns without sandbox=true: no CNP selects it"
  "$bin" render --policy "$cilium_policy" --namespace "$sandbox_ns" --name agent-2 --egress cilium |
    "$e2etool" sandbox --only-pod --unlabel sandbox >"$out/unlabelled.yaml"
  kc apply -f "$out/unlabelled.yaml" | quote
  kc -n "$sandbox_ns" wait --for=condition=Ready pod/agent-2 --timeout=120s >/dev/null || fail "agent-2 did not become Ready"
  "$netpol" enforced "$sandbox_ns" agent-2 && fail "Cilium enforces egress policy on agent-2: something selects it"
  say "${red}started${reset} — no CiliumNetworkPolicy selects it: Cilium lets everything through for agent-2"
  cilium_view unlabelled
  expect_caught sandprobe-cilium-unlabelled blocked.lab.test "pod/$sandbox_ns/agent-2"
  kc -n "$sandbox_ns" delete pod agent-2 --grace-period=1 --wait=true | quote
  step "undone" "agent-2 is gone"
  expect_green sandprobe-cilium-unlabelled-undone
}
