# shellcheck shell=bash
# shellcheck disable=SC2154 # the settings are hack/e2e.sh's, which sources this
# hack/e2e.sh's story: steps, waiting for the engine, a Job from the CronJob
# judged (green, or caught with names), who enforced each verdict, admission,
# teardown. Sourced by hack/e2e.sh after its settings (out, ns, kc, …).

bold=$'\e[1m' dim=$'\e[2m' red=$'\e[31m' green=$'\e[32m' reset=$'\e[0m'
[[ -t 1 && -z ${NO_COLOR:-} ]] || bold='' dim='' red='' green='' reset=''
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_all=$(now)
timings=()
step_name='' t_step='' step_no=0
step() { # step NAME [DETAIL]: a numbered chapter of the story, timed under NAME
  end_step
  step_no=$((step_no + 1)) step_name=$1 t_step=$(now)
  printf '\n%s▶ %d. %s%s%s\n' "$bold" "$step_no" "$1" "${2:+: $2}" "$reset"
}
end_step() {
  if [[ -n $step_name ]]; then timings+=("$(printf '%6ss  %d. %s' "$(secs "$t_step")" "$step_no" "$step_name")"); fi
  step_name=''
}
say() { printf '  %s\n' "$*"; }
quote() { sed "s/^/  $dim/; s/\$/$reset/"; }
ok() { printf '  %s✔%s %s\n' "$green" "$reset" "$*"; }
fail_msg=''
fail() {
  fail_msg="step $step_no ($step_name): $*"
  printf '  %s✘ %s%s\n' "$red" "$*" "$reset" >&2
  exit 1
}

# until_kr WHAT CMD...: wait (≤ 30 s) until kube-router's rules say CMD: a
# change is in force only once the engine has programmed it.
until_kr() {
  local what=$1 t; shift
  t=$(now)
  for _ in $(seq 150); do "$@" && break; sleep 0.2; done
  "$@" || fail "$engine never got there: $what"
  say "in force $(secs "$t") s later: $what"
}
not() { ! "$@"; }

# cleanup: on any exit, the state of a failure kept, then everything torn down
# (unless kept), the timings, and the failed step last.
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  end_step
  [[ -n $observer_pid ]] && kill "$observer_pid" 2>/dev/null
  if ((code != 0)) && [[ -s $kubeconfig ]]; then
    {
      echo "== jobs, pods, events in $ns"
      kc -n "$ns" get jobs,pods -o wide 2>&1
      kc -n "$ns" get events --sort-by=.lastTimestamp 2>&1 | tail -n 30
      for j in $(kc -n "$ns" get jobs -o name 2>/dev/null); do
        echo "== logs of $j"
        kc -n "$ns" logs "$j" --tail=80 2>&1
      done
    } > "$out/failure.txt" 2>&1 || true
    # The cluster's logs (kube-router, apiserver, kubelet) go down with it.
    rm -rf "$out/cluster-logs"
    cp -r "${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}/logs" "$out/cluster-logs" 2>/dev/null || true
    printf '\n%se2e failed (exit %d): state in %s/failure.txt, cluster logs in %s/cluster-logs%s\n' \
      "$red" "$code" "$out" "$out" "$reset" >&2
    tail -n 40 "$out/failure.txt" >&2 || true
  fi
  nft delete table inet "$witness_table" 2>/dev/null || true
  if [[ $keep == 1 ]]; then
    printf '\n%sSANDPROBE_E2E_KEEP=1: the cluster, the lab and the Pushgateway (pid %s) stay up; the locks are released%s\n' "$dim" "${pg_pid:-none}" "$reset"
  else
    local t; t=$(now)
    [[ -n $pg_pid ]] && { kill "$pg_pid" 2>/dev/null; wait "$pg_pid" 2>/dev/null; }
    hack/cluster/down.sh >/dev/null 2>&1 || { echo "e2e: hack/cluster/down.sh failed" >&2; code=1; }
    # Nothing of the engine may outlive the cluster: no chain, jump rule or ipset.
    if left=$("$netpol" leftovers 2>&1); [[ -n $left ]]; then
      echo "e2e: $engine left behind after down: $left" >&2; code=1
    fi
    "$lab" down >/dev/null 2>&1 || { echo "e2e: lab down failed" >&2; code=1; }
    timings+=("$(printf '%6ss  %s' "$(secs "$t")" "cluster down, lab down")")
  fi
  printf '\n%stimings%s\n' "$bold" "$reset"
  printf '  %s\n' "${timings[@]}"
  printf '  %6ss  total\n' "$(secs "$t_all")"
  # Last, so that a log's tail (CI keeps only the end) says what failed.
  [[ -n $fail_msg ]] && printf '\n%se2e failed at %s%s\n' "$red" "$fail_msg" "$reset" >&2
  exit "$code"
}
# ---- the runs -----------------------------------------------------------------------------
# run_job NAME: a Job from the CronJob, as the schedule would start it; waits
# for it to end and leaves $out/NAME.{log,xml,prom,pods,exit}.
run_job() {
  local job=$1 state='' code
  for set in pre mid post; do nft flush set inet "$witness_table" "$set"; done
  cilium_events_start "$job" # hack/e2e/cilium.sh
  kc -n "$ns" create job "$job" --from=cronjob/sandprobe | quote
  # Watch for the probe pod the runner starts (it deletes it when done), and
  # when the engine first restricts its egress ("NS/POD  isolated by …").
  (
    declare -A seen_ip=() isolated=()
    t0=$(now)
    while :; do
      pods=$(kc get pods -A -l app.kubernetes.io/name=sandprobe-probe,sandprobe.dev/run -o \
        jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}  labels: sandbox={.metadata.labels.sandbox}  runtimeClassName={.spec.runtimeClassName}  uid={.spec.securityContext.runAsUser}  ip={.status.podIP}  phase={.status.phase}{"\n"}{end}' 2>/dev/null)
      [[ -n $pods ]] && printf '%s\n' "$pods"
      while read -r pod _ _ _ _ ipf _; do
        [[ $ipf == ip=?* && -z ${isolated[$pod]:-} ]] || continue
        [[ -n ${seen_ip[$pod]:-} ]] || seen_ip[$pod]=$(now)
        if "$netpol" enforced "${pod%%/*}" "${pod#*/}"; then
          isolated[$pod]=1
          echo "$pod  isolated by $engine $(secs "${seen_ip[$pod]}") s after its address appeared ($(secs "$t0") s into the run)"
        fi
      done <<<"$pods"
      sleep 0.3
    done
  ) > "$out/$job.pods.raw" &
  observer_pid=$!
  for _ in $(seq 600); do
    state=$(kc -n "$ns" get job "$job" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}')
    [[ $state == *Complete* || $state == *Failed* ]] && break
    sleep 0.5
  done
  kill "$observer_pid" 2>/dev/null; wait "$observer_pid" 2>/dev/null || true
  observer_pid=''
  cilium_events_stop
  awk '!seen[$0]++' "$out/$job.pods.raw" > "$out/$job.pods"
  nft -j list table inet "$witness_table" > "$out/$job.witness.json"
  [[ $state == *Complete* || $state == *Failed* ]] || fail "job $job did not finish in 300 s"
  code=$(kc -n "$ns" get pods -l "batch.kubernetes.io/job-name=$job" \
    -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}')
  echo "$code" > "$out/$job.exit"
  kc -n "$ns" logs "job/$job" > "$out/$job.log" 2>&1 || true
  # stdout is the JUnit report (SANDPROBE_OUTPUT=junit); stderr's log lines
  # share the stream.
  sed -n '/^<?xml/,/^<\/testsuites>/p' "$out/$job.log" > "$out/$job.xml"
  curl -fsS "http://$pushgateway/metrics" | grep -E '^sandprobe_' | grep 'cluster="e2e"' > "$out/$job.prom" || true
}

# junit_attr ATTR FILE: an attribute of <testsuites>.
junit_attr() { sed -n "s/.*<testsuites [^>]*$1=\"\\([0-9]*\\)\".*/\\1/p" "$2" | head -n 1; }
# junit_failures FILE: "suite / testcase: message" for each failure.
junit_failures() {
  "$e2etool" junit-failures "$1"
}
# metric NAME FILE: the sum of a metric's samples.
metric() { awk -v m="$1" 'index($0, m"{") == 1 || index($0, m" ") == 1 { s += $NF; n++ } END { if (n) print s + 0; else print "absent" }' "$2"; }

show_run() {
  local job=$1
  say "probe pod seen while the runner waited:"
  if [[ -s $out/$job.pods ]]; then quote < "$out/$job.pods"; else say "  (none seen)"; fi
  isolation "$job" >/dev/null || say "  $engine never restricted the probe pod's egress while it was watched"
  say "runner exit code: $(cat "$out/$job.exit")"
  say "JUnit: tests=$(junit_attr tests "$out/$job.xml") failures=$(junit_attr failures "$out/$job.xml") errors=$(junit_attr errors "$out/$job.xml") skipped=$(junit_attr skipped "$out/$job.xml")"
  say "metrics (Pushgateway): sandprobe_up=$(metric sandprobe_up "$out/$job.prom") sandprobe_sandboxes_scanned=$(metric sandprobe_sandboxes_scanned "$out/$job.prom") sandprobe_egress_unexpected_open=$(metric sandprobe_egress_unexpected_open "$out/$job.prom") sandprobe_egress_allowed_unreachable=$(metric sandprobe_egress_allowed_unreachable "$out/$job.prom")"
}

# The probe pod must have run like a sandbox: in the sandbox namespace, with
# the selector's label and the policy's runtime class.
check_probe_pod() {
  local job=$1
  grep -q '^sandboxes/.*  labels: sandbox=true  runtimeClassName=gvisor' "$out/$job.pods" \
    || fail "no probe pod in namespace sandboxes with label sandbox=true and runtimeClassName=gvisor was seen (see $out/$job.pods)"
}

# isolation JOB: when kube-router isolated the run's probe pod in the
# sandbox namespace (its line from the observer); exit 1 if it never did.
isolation() { grep -m1 "^$sandbox_ns/.*  isolated by $engine " "$out/$1.pods"; }
isolation_said() { local l; if l=$(isolation "$1"); then echo "the probe pod ${l#*  }"; else echo "$engine never isolated the probe pod while it was watched"; fi; }

# probe_ips JOB: the addresses the probe pods of a run had.
probe_ips() { sed -n 's/.*  ip=\([0-9.][0-9.]*\)  .*/\1/p' "$out/$1.pods" | sort -u; }

# enforcers JOB [--expect healthy]: which component enforced each egress
# verdict of the run (hack/e2e/enforcers), printed and kept in JOB.enforcers.
enforcers() {
  local job=$1; shift
  local args=() ip
  for ip in $(probe_ips "$job"); do args+=(--probe-ip "$ip"); done
  ((${#args[@]})) || fail "no probe pod address was seen for $job (see $out/$job.pods)"
  [[ $cni == cilium ]] && args+=(--cilium-events "$out/$job.cilium.json")
  "$enforcers_bin" --junit "$out/$job.xml" --witness "$out/$job.witness.json" \
    --lab-json "${SANDPROBE_LAB_DIR:-/run/sandprobe-lab}/lab.json" "${args[@]}" "$@" > "$out/$job.enforcers" 2>&1
}

# expect_green JOB: the run is conformant, every deny enforced by what this
# cluster promises (kube-router's NetworkPolicy, the proxy's deny, the resolver).
expect_green() {
  local job=$1
  run_job "$job"
  show_run "$job"
  check_probe_pod "$job"
  [[ $(cat "$out/$job.exit") == 0 ]] || { junit_failures "$out/$job.xml" | quote; fail "$job exited $(cat "$out/$job.exit"), want 0 (see $out/$job.log); $(isolation_said "$job"); failures: $(junit_failures "$out/$job.xml" | head -n 6 | paste -sd '|')"; }
  [[ $(junit_attr failures "$out/$job.xml") == 0 && $(junit_attr errors "$out/$job.xml") == 0 ]] \
    || fail "$job's JUnit has failures or errors ($out/$job.xml)"
  [[ $(metric sandprobe_up "$out/$job.prom") == 1 && $(metric sandprobe_egress_unexpected_open "$out/$job.prom") == 0 ]] \
    || fail "$job's metrics are not sandprobe_up 1, egress_unexpected_open 0 ($out/$job.prom)"
  [[ $(metric sandprobe_sandboxes_scanned "$out/$job.prom") -ge 1 ]] \
    || fail "drift scanned no sandbox (sandprobe_sandboxes_scanned in $out/$job.prom)"
  if ! enforcers "$job" --expect healthy; then quote <"$out/$job.enforcers"; fail "$job: a verdict was not enforced by what the e2e cluster promises: $(grep '^  ' "$out/$job.enforcers" | head -n 6 | paste -sd '|')"; fi
  say "who enforced each verdict:"
  quote < "$out/$job.enforcers"
  if grep -q 'not yet in force when this pod started' "$out/$job.xml"; then
    say "the probe pod ran before kube-router isolated it (v2.1 has no --netpol-default-deny): the denies that answered then were denied twice in a row on the re-dials"
  fi
  ok "${green}conformant${reset}: exit 0, no failure, every must-fail destination blocked — by $blocked_by"
}

# run_failing JOB: a Job from the CronJob, shown; it must exit 1.
run_failing() {
  run_job "$1"; show_run "$1"; check_probe_pod "$1"
  [[ $(cat "$out/$1.exit") == 1 ]] || fail "$1 exited $(cat "$out/$1.exit"), want 1 (not conformant; see $out/$1.log)"
}

# expect_caught JOB DEST [DRIFT_OBJECT]: the run is not conformant, its JUnit
# names DEST as a destination that answered, sandprobe_egress_unexpected_open
# is > 0 with its node and namespace labels, and, when given, drift names
# DRIFT_OBJECT; with "-" for DRIFT_OBJECT, drift must find nothing (no spec
# changed: only the probe can see it). DEST "-": no egress verdict changes
# (only drift can see it).
expect_caught() {
  local job=$1 dest=$2 obj=${3:-} open samples
  run_failing "$job"
  [[ $(junit_attr failures "$out/$job.xml") -gt 0 ]] || fail "$job's JUnit has no failure"
  if [[ $dest != - ]]; then
  open=$(metric sandprobe_egress_unexpected_open "$out/$job.prom")
  [[ $open != absent && $open -gt 0 ]] || fail "sandprobe_egress_unexpected_open is $open in $job, want > 0"
  samples=$(grep -E '^sandprobe_egress_unexpected_open\{' "$out/$job.prom" | awk '$NF > 0')
  [[ $samples == *'node="'* && $samples == *"namespace=\"$sandbox_ns\""* ]] \
    || fail "sandprobe_egress_unexpected_open > 0 does not carry node and namespace=\"$sandbox_ns\" labels: $samples"
  say "what answered (JUnit failures):"
  junit_failures "$out/$job.xml" | quote
  junit_failures "$out/$job.xml" | grep "egress.* $dest" >/dev/null || fail "$job's JUnit does not name $dest as a destination that answered"
  say "the page (Pushgateway):"
  quote <<<"$samples"
  else
    say "JUnit failures:"
    junit_failures "$out/$job.xml" | quote
  fi
  case $obj in
    "") ;;
    -)
      local drift; drift=$(metric sandprobe_drift_findings "$out/$job.prom")
      [[ $drift == absent || $drift == 0 ]] || fail "$job: drift found $drift differences, but no spec changed"
      ok "drift: nothing changed in any spec — only the probe saw it" ;;
    *)
      grep -q "$obj" "$out/$job.xml" || fail "$job's drift does not name $obj"
      say "drift names it:"
      junit_failures "$out/$job.xml" | grep -F "$obj" | head -n 3 | quote ;;
  esac
  enforcers "$job" || true
  say "who enforced each verdict (or nobody):"
  grep -E 'FAIL|enforced by' "$out/$job.enforcers" | quote
  if [[ $dest == - ]]; then
    ok "${red}not conformant${reset}: exit 1, and drift names $obj (the probe pod carries the label, so its own egress is unchanged)"
  else
    ok "${red}not conformant${reset}: exit 1, and the reports say which destination answered"
  fi
}



# install_witness: the witness table, in the forward hook around the node's
# filters: where the node saw each new connection of a pod towards the lab,
# before and after each filter, counted per dial (read by enforcers).
install_witness() {
nft -f - <<NFT || fail "could not install the witness table"
table inet $witness_table {
  set pre { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags dynamic; counter; size 65535; }
  set mid { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags dynamic; counter; size 65535; }
  set post { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags dynamic; counter; size 65535; }
  chain pre {
    type filter hook forward priority -30; policy accept;
    ip saddr 10.244.0.0/24 ip daddr 10.99.0.0/16 meta l4proto { tcp, udp } ct state new add @pre { ip saddr . ip daddr . meta l4proto . th dport }
  }
  chain mid {
    type filter hook forward priority -5; policy accept;
    ip saddr 10.244.0.0/24 ip daddr 10.99.0.0/16 meta l4proto { tcp, udp } ct state new add @mid { ip saddr . ip daddr . meta l4proto . th dport }
  }
  chain post {
    type filter hook forward priority 10; policy accept;
    ip saddr 10.244.0.0/24 ip daddr 10.99.0.0/16 meta l4proto { tcp, udp } ct state new add @post { ip saddr . ip daddr . meta l4proto . th dport }
  }
}
NFT
}

# try NAME WANT [kubectl run flags...]: WANT is refused or admitted.
try() {
  local name=$1 want=$2 msg; shift 2
  if msg=$(kc -n "$sandbox_ns" run "$name" --image="$image" --image-pull-policy=Never --restart=Never "$@" 2>&1); then
    [[ $want == admitted ]] || fail "$name was admitted: $msg"
    ok "$name: admitted"
  else
    [[ $want == refused ]] || fail "$name was refused: $msg"
    [[ $msg == *"allows only gvisor"* ]] || fail "$name was refused, but not by the admission policy: $msg"
    ok "$name: refused"
    printf '%s\n' "$msg" | fold -s -w 110 | quote
  fi
}
