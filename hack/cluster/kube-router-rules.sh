# shellcheck shell=bash
# What kube-router's network-policy controller programs, and how to remove
# exactly that: sourced by netpol.sh (its down, leftovers and status) and
# copied into the DaemonSet image (netpol.sh up --daemonset), whose
# firewall-off template removes the rules the way a broken agent upgrade
# leaves a node. Plain bash + iptables + ipset: no lib.sh, so it also runs
# inside the pod.

# What kube-router's network-policy controller creates (filter table, IPv4).
KR_CHAIN_RE='^(KUBE-ROUTER-(INPUT|FORWARD|OUTPUT)|KUBE-NWPLCY-|KUBE-POD-FW-)'
KR_IPSET_RE='^(inet6:)?KUBE-(SRC|DST)-'

# kr_chains: kube-router's chains in the filter table, one a line.
kr_chains() { iptables -w -t filter -S 2>/dev/null | awk '$1 == "-N" { print $2 }' | grep -E "$KR_CHAIN_RE" || true; }
# kr_jumps: the rules in the built-in chains that jump into kube-router's.
kr_jumps() { iptables -w -t filter -S 2>/dev/null | grep -E '^-A (INPUT|FORWARD|OUTPUT) .*-j KUBE-ROUTER-' || true; }
kr_ipsets() { ipset list -n 2>/dev/null | grep -E "$KR_IPSET_RE" || true; }

# remove_rules: delete exactly kube-router's jump rules, chains and ipsets,
# nothing else of the filter table (the kubelet's and the Docker test
# engine's chains live there too). Never `kube-router --cleanup-config`: it
# flushes every IPVS service and every ipset on the machine.
remove_rules() {
  local rule chain set chains
  while IFS= read -r rule; do
    [[ -n $rule ]] || continue
    # "-A FORWARD -m comment ... -j KUBE-ROUTER-FORWARD" -> "-D FORWARD ..."
    eval "iptables -w -t filter -D ${rule#-A }" || echo "warning: could not delete: $rule" >&2
  done < <(kr_jumps)
  mapfile -t chains < <(kr_chains)
  for chain in "${chains[@]}"; do iptables -w -t filter -F "$chain" || true; done
  for chain in "${chains[@]}"; do iptables -w -t filter -X "$chain" || echo "warning: could not delete chain $chain" >&2; done
  while IFS= read -r set; do
    [[ -n $set ]] && { ipset destroy "$set" || echo "warning: could not destroy ipset $set" >&2; }
  done < <(kr_ipsets)
}
