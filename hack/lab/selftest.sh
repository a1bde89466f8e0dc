#!/usr/bin/env bash
# Self-test of the sandprobe network lab. Brings the lab up (timed), asserts
# from inside sp-sandbox that allowed things answer and must-fail things fail
# with their intended flavour, that every broken state opens exactly what it
# should and heal restores it, and that no lab namespace has a path to the
# machine's real interfaces (route lookups only: no packet is ever sent to an
# address outside the lab). Then takes the lab down (timed) and checks that
# nothing is left. Prints a PASS/FAIL table; exits non-zero on any failure.
#
#   selftest.sh [--full] [--keep]
#     --full   flush-rule every named rule one by one (slower, ~1 min more)
#     --keep   leave the lab up at the end (after the timed down, up again)
# A lab that was up before the selftest is brought up again at the end.
set -uo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=addrs.sh
. "$HERE/addrs.sh"
LAB="$HERE/lab"
# the lab's own clients (dns, sweep), from the binary `lab up` built
TOOL="$LAB_DIR/bin/sandprobe-lab"
export LAB_QUIET=1

FULL="" KEEP=""
for a in "$@"; do
  case $a in
    --full) FULL=1 ;;
    --keep) KEEP=1 ;;
    *) echo "usage: selftest.sh [--full] [--keep]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "selftest: must run as root" >&2; exit 1; }

WAS_UP=""
[ -e "/run/netns/$NS_ROUTER" ] && WAS_UP=1

PASSES=0 FAILS=0
RESULTS=()
record() { # record PASS|FAIL NAME DETAIL
  RESULTS+=("$(printf '%-4s  %-46s %s' "$1" "$2" "$3")")
  if [ "$1" = PASS ]; then PASSES=$((PASSES + 1)); else FAILS=$((FAILS + 1)); fi
  [ -n "${VERBOSE:-}" ] && echo "${RESULTS[-1]}" >&2
  return 0
}
check() { # check NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then record PASS "$1" "$3"; else record FAIL "$1" "want [$2] got [$3]"; fi
}
check_match() { # check_match NAME REGEX ACTUAL
  if [[ $3 =~ $2 ]]; then record PASS "$1" "${3:0:60}"; else record FAIL "$1" "want /$2/ got [${3:0:120}]"; fi
}

sbx() { ip netns exec "$NS_SANDBOX" "$@"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }

# ------------------------------------------------------------------ up
[ -n "$WAS_UP" ] && "$LAB" down # so that the first timed up is a cold one
t0=$(now)
if ! "$LAB" up; then
  record FAIL "lab up" "failed"
  printf '%s\n' "${RESULTS[@]}"
  echo "selftest: 0 passed, 1 failed"
  exit 1
fi
t1=$(now)
UP_COLD=$(elapsed "$t0" "$t1")
t0=$(now)
"$LAB" up
t1=$(now)
UP_AGAIN=$(elapsed "$t0" "$t1")
record PASS "lab up (cold)" "${UP_COLD}s"
record PASS "lab up (over a running lab)" "${UP_AGAIN}s"
# shellcheck disable=SC1091
. "$LAB_DIR/lab.env"
check "lab.json is valid JSON" ok "$(jq -e . "$LAB_DIR/lab.json" >/dev/null 2>&1 && echo ok)"
check "lab status says up" "lab: up" "$("$LAB" status | head -1 | awk '{print $1, $2}')"

# ------------------------------------------------------------------ safety
# (hack/cluster's own links, sp-node* and sp-cni0, are not the lab's)
lab_root_links() { ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^sp-' | grep -vE '^sp-(node|cni)'; }
ROOT_LINKS=$(lab_root_links | grep -c . || true)
check "root ns: no sp-* interface" 0 "$ROOT_LINKS"
check "root ns: no route into 10.99.0.0/16" "" "$(ip -4 route show table all | grep -E '(^|[^0-9])10\.99\.' || true)"
check "root ns: no route into fd99::/48" "" "$(ip -6 route show table all | grep -iE 'fd99:' || true)"
check "root ns: no nft table sp_cni" "" "$(nft list tables 2>/dev/null | grep sp_cni || true)"

bad=""
for ns in "${LAB_NAMESPACES[@]}"; do
  while read -r line; do
    dev=$(echo "$line" | awk -F': ' '{print $2}'); dev=${dev%@*}
    [ "$dev" = lo ] && continue
    peer=$(echo "$line" | sed -n 's/.*link-netns \([^ ]*\).*/\1/p')
    case "$dev" in sp-*) ;; *) bad+=" $ns:$dev(not sp-)";; esac
    in_lab=""
    for n in "${LAB_NAMESPACES[@]}"; do [ "$peer" = "$n" ] && in_lab=1; done
    [ -n "$in_lab" ] || bad+=" $ns:$dev(peer=${peer:-root/unknown})"
  done < <(ip -n "$ns" -o link show)
done
check "every lab veth's peer is in a lab namespace" "" "$bad"
n_sbx=$(ip -n "$NS_SANDBOX" -o link show | grep -vc ': lo:')
check "sp-sandbox has exactly one link (to sp-router)" "1 sp-router" "$n_sbx $(ip -n "$NS_SANDBOX" -o link show "$IF_SANDBOX" | sed -n 's/.*link-netns \([^ ]*\).*/\1/p')"
check "sp-router has no default route (v4+v6)" "" "$(ip -n "$NS_ROUTER" route show default; ip -n "$NS_ROUTER" -6 route show default)"

# addresses outside the lab, used for route LOOKUPS only (never a packet)
OUTSIDE=()
while read -r a; do OUTSIDE+=("${a%/*}"); done < <(ip -o addr show scope global | awk '$2 != "lo" {print $4}')
while read -r a; do OUTSIDE+=("$a"); done < <(ip route show default | awk '{print $3}'; ip -6 route show default | awk '{print $3}')
while read -r a; do OUTSIDE+=("$a"); done < <(awk '/^nameserver/ {print $2}' /etc/resolv.conf)
OUTSIDE+=(1.1.1.1 8.8.8.8 2606:4700:4700::1111 169.254.169.254 10.244.0.10 192.168.1.1)
bad=""
for a in "${OUTSIDE[@]}"; do
  for ns in "${LAB_NAMESPACES[@]}"; do
    out=$(ip -n "$ns" route get "$a" 2>&1)
    if [ "$ns" = "$NS_SANDBOX" ]; then
      # the sandbox's only way out is its default route to sp-router ...
      case $out in
        *"dev $IF_SANDBOX"*) ;;
        *unreachable* | *"No route"*) ;;
        *) bad+=" $ns->$a[$out]" ;;
      esac
    else
      case $out in *unreachable* | *"No route"*) ;; *) bad+=" $ns->$a[$out]" ;; esac
    fi
  done
  # ... and sp-router cannot forward it anywhere
  fam=""; [[ $a == *:* ]] && fam=6
  src=$SANDBOX_IP4; [ -n "$fam" ] && src=$SANDBOX_IP6
  out=$(ip -n "$NS_ROUTER" route get "$a" from "$src" iif "$IF_ROUTER_SANDBOX" 2>&1)
  case $out in *unreachable* | *"No route"*) ;; *) bad+=" forward:$a[$out]" ;; esac
done
check "no route from any lab ns to ${#OUTSIDE[@]} outside addrs" "" "$bad"
check "sp-router forwards (only between lab links)" "1 1" "$(ip netns exec "$NS_ROUTER" cat /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv6/conf/all/forwarding | paste -sd' ')"
check "sandbox resolv.conf points at the lab resolver" "$RESOLVER_IP4 $RESOLVER_IP6" "$(awk '/^nameserver/ {print $2}' "/etc/netns/$NS_SANDBOX/resolv.conf" | paste -sd' ')"

# ------------------------------------------------------------------ DNS
dnsq() { sbx "$TOOL" dns "$@" 2>&1; }
# the sandbox's resolver answers the allowed names (and the proxy's) only:
# everything else is REFUSED, as a DNS proxy with an allow-list does
for h in "${ALLOWED_HOSTS[@]}"; do
  read -r name ip4 ip6 _ <<<"$h"
  check "dns A $name" "NOERROR $ip4" "$(dnsq "$name" A --server "$RESOLVER_IP4")"
  check "dns AAAA $name (v6 resolver)" "NOERROR $ip6" "$(dnsq "$name" AAAA --server "$RESOLVER_IP6")"
done
check "dns A proxy.lab.test" "NOERROR $PROXY_IP4" "$(dnsq proxy.lab.test A --server "$RESOLVER_IP4")"
check "dns wildcard anything.git.lab.test" "NOERROR $GIT_WILDCARD_IP4" "$(dnsq anything.git.lab.test A --server "$RESOLVER_IP4")"
RANDNAME="r$RANDOM$RANDOM"
for n in blocked.lab.test exfil.lab.test "$METADATA_NAME" "$RANDNAME.lab.test" "$RANDNAME.$CANARY_ZONE" example.com; do
  check "dns $n -> REFUSED (outside the allow-list)" REFUSED "$(dnsq "$n" A --server "$RESOLVER_IP4")"
done
check "dns x.sbx.svc.cluster.local -> NXDOMAIN (a pod's search list)" NXDOMAIN "$(dnsq x.sbx.svc.cluster.local A --server "$RESOLVER_IP4")"
# the internet's DNS (the authority), reachable from the service namespaces only
auth() { ip netns exec "$NS_DNS" "$TOOL" dns "$@" 2>&1; }
check "authority: blocked.lab.test" "NOERROR 10.99.20.20" "$(auth blocked.lab.test A --server "$AUTHORITY_IP4")"
check "authority: canary wildcard" "NOERROR $DNS_OPEN_IP4" "$(auth "$RANDNAME.$CANARY_ZONE" A --server "$AUTHORITY_IP6")"
check "authority: anything else NXDOMAIN" NXDOMAIN "$(auth "$RANDNAME.example.org" A --server "$AUTHORITY_IP4")"
check "authority answers on a must-fail IP too" "NOERROR 10.99.10.10" "$(auth api.lab.test A --server 10.99.20.10)"
check "authority logs every query" 1 "$(grep -c " $RANDNAME.example.org " "$LAB_DIR/dns/queries.log")"
check "the sandbox cannot reach the authority" TIMEOUT "$(dnsq api.lab.test A --server "$AUTHORITY_IP4" --timeout 1)"
check "getent (libc resolver) api.lab.test" "10.99.10.10" "$(sbx getent ahostsv4 api.lab.test | awk 'NR==1{print $1}')"
sbx getent hosts "$RANDNAME.lab.test" >/dev/null 2>&1
check "getent $RANDNAME.lab.test fails (exit 2)" 2 "$?"

# ------------------------------------------------------------------ proxy
# curl_code ARGS... -> "<http_code>/<connect_code>" (000 when no HTTP answer)
curl_code() { sbx curl -sS --max-time 5 -o /dev/null -w '%{http_code}/%{http_connect}' "$@" 2>/dev/null; }
curl_body() { sbx curl -sS --max-time 5 "$@" 2>&1 | head -1; }
for h in "${ALLOWED_HOSTS[@]}"; do
  read -r name ip4 ip6 _ <<<"$h"
  check "proxy CONNECT $name:443 + TLS (lab CA)" "sandprobe-lab host=$name" \
    "$(curl_body --cacert "$LAB_CA" -x "$LAB_PROXY_URL" "https://$name/" | awk '{print $1, $2}')"
  check "proxy GET http://$name/" "sandprobe-lab host=$name" "$(curl_body -x "$LAB_PROXY_URL" "http://$name/" | awk '{print $1, $2}')"
done
check "proxy over IPv6 CONNECT api.lab.test" "200/200" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL6" https://api.lab.test/)"
check "proxy CONNECT objects.git.lab.test answers 200" "200/200" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://objects.git.lab.test/)"
check "TLS fails without the lab CA" "60" "$(sbx curl -sS --max-time 5 -o /dev/null -x "$LAB_PROXY_URL" https://api.lab.test/ >/dev/null 2>&1; echo $?)"
check "proxy CONNECT blocked.lab.test -> 403" "000/403" "$(curl_code -k -x "$LAB_PROXY_URL" https://blocked.lab.test/)"
check "proxy CONNECT exfil.lab.test -> 403" "000/403" "$(curl_code -k -x "$LAB_PROXY_URL" https://exfil.lab.test/)"
check "proxy GET http://exfil.lab.test/ -> 403" "403/000" "$(curl_code -x "$LAB_PROXY_URL" http://exfil.lab.test/)"
check "proxy CONNECT example.com -> 403" "000/403" "$(curl_code -k -x "$LAB_PROXY_URL" https://example.com/)"
check "proxy CONNECT raw IP of api.lab.test -> 403" "000/403" "$(curl_code -k -x "$LAB_PROXY_URL" https://10.99.10.10/)"
check "proxy CONNECT metadata -> 403" "000/403" "$(curl_code -p -x "$LAB_PROXY_URL" "http://$METADATA_IP4/")"
check "proxy CONNECT api.lab.test:8080 -> 403" "000/403" "$(curl_code -p -x "$LAB_PROXY_URL" http://api.lab.test:8080/)"
check "proxy CONNECT evilgit.lab.test -> 403" "000/403" "$(curl_code -k -x "$LAB_PROXY_URL" https://evilgit.lab.test/)"
check "proxy denied reason line" "HTTP/1.1 403 Filtered" "$(sbx curl -sS --max-time 5 -k -v -x "$LAB_PROXY_URL" https://blocked.lab.test/ 2>&1 | sed -n 's/^< \(HTTP[^\r]*\).*/\1/p' | head -1 | tr -d '\r')"

# domain fronting: a tunnel for api.lab.test carrying a ClientHello for
# fronted.lab.test (which the api front also serves)
front() { sbx curl -sS --max-time 5 --cacert "$LAB_CA" -x "$LAB_PROXY_URL" --connect-to fronted.lab.test:443:api.lab.test:443 "$@" https://fronted.lab.test/ 2>&1 | head -1; }
check "tinyproxy: fronted.lab.test through a tunnel for api.lab.test answers" "sni=fronted.lab.test hostheader=fronted.lab.test" "$(front | awk '{print $6, $7}')"
if command -v squid >/dev/null; then
  "$LAB" proxy squid >/dev/null 2>&1
  check "squid: proxy CONNECT api.lab.test + TLS" "sandprobe-lab host=api.lab.test" "$(curl_body --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://api.lab.test/ | awk '{print $1, $2}')"
  check "squid: ClientHello for fronted.lab.test cut (curl 35)" "35" "$(front -o /dev/null >/dev/null 2>&1; echo $?)"
  check "squid: CONNECT blocked.lab.test -> 200, then 403 inside TLS" "403/200" "$(curl_code -k -x "$LAB_PROXY_URL" https://blocked.lab.test/)"
  check "squid: GET http://blocked.lab.test/ -> 403" "403/000" "$(curl_code -x "$LAB_PROXY_URL" http://blocked.lab.test/)"
  "$LAB" heal >/dev/null 2>&1
  check "heal returns to tinyproxy" "tinyproxy" "$("$LAB" proxy)"
else
  check "squid installed (squid-openssl) for the squid flavour" "yes" "no"
fi

# concurrency: 200 requests, 100 at a time, through the proxy with TLS
urls=(); for i in $(seq 1 200); do urls+=(-o /dev/null "https://api.lab.test/c$i"); done
codes=$(sbx curl -s --max-time 30 -Z --parallel-max 100 --cacert "$LAB_CA" -x "$LAB_PROXY_URL" -w '%{http_code}\n' "${urls[@]}" 2>/dev/null | sort | uniq -c | awk '{print $2 "x" $1}' | paste -sd' ')
check "200 concurrent HTTPS via proxy all 200" "200x200" "$codes"
# and 200 concurrent direct connections to live listeners (egress-open)
"$LAB" break egress-open >/dev/null 2>&1
args=(); for i in $(seq 1 100); do args+=("a$i=10.99.20.10:80" "b$i=[fd99:0:0:11::11]:80"); done
codes=$(sbx "$TOOL" sweep --timeout 10 "${args[@]}" | awk '{print $2}' | sort | uniq -c | awk '{print $2 "x" $1}' | paste -sd' ')
check "200 concurrent direct connections answered" "OK:objects.git.lab.testx100 OK:raw-dropx100" "$codes"
"$LAB" heal egress-open >/dev/null 2>&1

# ------------------------------------------------------------------ direct sweeps
# target table: key family category address expected-errno
TARGETS=()
for h in "${ALLOWED_HOSTS[@]}"; do
  read -r name ip4 ip6 _ <<<"$h"; k=${name%%.*}
  TARGETS+=("direct-$k-v4 4 allowed $ip4 EHOSTUNREACH" "direct-$k-v6 6 allowed $ip6 EACCES")
done
for t in "${RAW_TARGETS[@]}"; do
  read -r key ip4 ip6 rname fl <<<"$t"
  case $fl in
    drop) e4=ETIMEDOUT e6=ETIMEDOUT ;;
    tcp-reset | icmp-port-unreachable) e4=ECONNREFUSED e6=ECONNREFUSED ;;
    icmp-host-unreachable) e4=EHOSTUNREACH e6=EHOSTUNREACH ;;
    icmp-admin-prohibited) e4=EHOSTUNREACH e6=EACCES ;;
    icmp-net-unreachable) e4=ENETUNREACH e6=ENETUNREACH ;;
  esac
  TARGETS+=("raw-$key-v4 4 raw $ip4 $e4" "raw-$key-v6 6 raw $ip6 $e6")
done
TARGETS+=("blocked-v4 4 blocked 10.99.20.20 ETIMEDOUT" "blocked-v6 6 blocked fd99:0:0:20::20 ETIMEDOUT")
TARGETS+=("exfil-v4 4 exfil 10.99.20.21 ECONNREFUSED" "exfil-v6 6 exfil fd99:0:0:20::21 ECONNREFUSED")
for x in "${METADATA_STANDINS[@]}"; do
  read -r ip4 ip6 _ <<<"$x"
  TARGETS+=("metadata-v4-$ip4 4 metadata $ip4 ETIMEDOUT" "metadata-v6-$ip4 6 metadata $ip6 ETIMEDOUT")
done
# rule names guarding each target (v4 name; v6 name is NAME6)
rule_of() {
  case $1 in
    direct-*) echo deny-direct-allowed ;;
    raw-*) local k=${1#raw-}; k=${k%-v?}; local t; for t in "${RAW_TARGETS[@]}"; do set -- $t; [ "$1" = "$k" ] && echo "$4"; done ;;
    blocked-*) echo default-deny ;;
    exfil-*) echo deny-exfil ;;
    metadata-*) echo deny-metadata ;;
  esac
}

# sweep [PORT] -> fills SWEEP[key]=result (all targets concurrently, 2.5s timeout)
declare -A SWEEP
sweep() {
  local port=${1:-80} args=() t key fam cat addr exp
  for t in "${TARGETS[@]}"; do
    read -r key fam cat addr exp <<<"$t"
    if [ "$fam" = 6 ]; then args+=("$key=[$addr]:$port"); else args+=("$key=$addr:$port"); fi
  done
  SWEEP=()
  while read -r key res; do SWEEP[$key]=$res; done < <(sbx "$TOOL" sweep --timeout 2.5 "${args[@]}")
}

# expect_sweep LABEL OPEN_PREDICATE : every target must answer iff predicate says so,
# otherwise fail with its healthy errno. Predicate gets: key fam cat
expect_sweep() {
  local label=$1 pred=$2 t key fam cat addr exp want got bad="" opened=""
  sweep 80
  for t in "${TARGETS[@]}"; do
    read -r key fam cat addr exp <<<"$t"
    if $pred "$key" "$fam" "$cat"; then want=OK; else want=$exp; fi
    got=${SWEEP[$key]:-missing}
    [ "${got%%:*}" = OK ] && opened+=" $key"
    [ "${got%%:*}" = "$want" ] || bad+=" $key(want $want got $got)"
  done
  if [ -z "$bad" ]; then record PASS "$label" "answered:${opened:- none}"; else record FAIL "$label" "$bad"; fi
}

none_open() { return 1; }
expect_sweep "healthy: every direct target fails as intended" none_open
# per-flavour rows for the errno table
for t in "${TARGETS[@]}"; do
  read -r key fam cat addr exp <<<"$t"
  check "  $key $addr" "$exp" "${SWEEP[$key]}"
done
# same on 443 for a few (rules are per address, not per port)
sweep 443
check "healthy: raw-reset-v4:443 refused" ECONNREFUSED "${SWEEP[raw-reset-v4]}"
check "healthy: direct-api-v6:443 EACCES" EACCES "${SWEEP[direct-api-v6]}"

# curl's view of each flavour (what a person sees)
curl_err() { sbx curl -sS -v --max-time 2.5 "http://$1/" 2>&1 | sed -n 's/.*connect to .* failed: \(.*\)/\1/p; s/.*\(Connection timed out\).*/\1/p' | head -1; }
check "curl: DROP -> timeout" "Connection timed out" "$(curl_err 10.99.20.10)"
check "curl: tcp reset -> Connection refused" "Connection refused" "$(curl_err 10.99.20.11)"
check "curl: icmp port-unreach -> Connection refused" "Connection refused" "$(curl_err 10.99.20.12)"
check "curl: icmp host-unreach -> No route to host" "No route to host" "$(curl_err 10.99.20.13)"
check "curl: icmp admin-prohib v4 -> No route to host" "No route to host" "$(curl_err 10.99.20.14)"
check "curl: icmpv6 admin-prohib -> Permission denied" "Permission denied" "$(curl_err '[fd99:0:0:20::14]')"
check "curl: icmp net-unreach -> Network is unreachable" "Network is unreachable" "$(curl_err 10.99.20.15)"

# ------------------------------------------------------------------ broken states
brk() { "$LAB" break "$@" >/dev/null 2>&1 || record FAIL "lab break $*" "command failed"; }
heal() { "$LAB" heal "$@" >/dev/null 2>&1 || record FAIL "lab heal $*" "command failed"; }

all_open() { return 0; }
raw_open() { [ "$3" = raw ]; }
meta_open() { [ "$3" = metadata ]; }
v6_open() { [ "$2" = 6 ]; }
bypass_open() { [ "$3" = allowed ]; }

brk egress-open; expect_sweep "break egress-open: everything answers" all_open
heal egress-open; expect_sweep "heal egress-open" none_open
brk raw-ips-open; expect_sweep "break raw-ips-open: only raw IPs answer" raw_open
heal raw-ips-open; expect_sweep "heal raw-ips-open" none_open
brk metadata-open; expect_sweep "break metadata-open: only metadata answers" meta_open
check "  metadata body" "sandprobe-lab host=$METADATA_NAME" "$(curl_body "http://$METADATA_IP4/" | awk '{print $1, $2}')"
heal metadata-open; expect_sweep "heal metadata-open" none_open
brk ipv6-open; expect_sweep "break ipv6-open: all v6 answers, no v4" v6_open
heal ipv6-open; expect_sweep "heal ipv6-open" none_open
brk proxy-bypass; expect_sweep "break proxy-bypass: allowed hosts direct" bypass_open
check "  direct https://api.lab.test (TLS)" "sandprobe-lab host=api.lab.test" "$(curl_body --cacert "$LAB_CA" https://api.lab.test/ | awk '{print $1, $2}')"
heal proxy-bypass; expect_sweep "heal proxy-bypass" none_open

brk proxy-open
check "break proxy-open: CONNECT blocked.lab.test 200" "200/200" "$(curl_code -k -x "$LAB_PROXY_URL" https://blocked.lab.test/)"
check "  proxy GET metadata answers" "sandprobe-lab host=$METADATA_NAME" "$(curl_body -x "$LAB_PROXY_URL" "http://$METADATA_IP4/" | awk '{print $1, $2}')"
check "  allowed still 200" "200/200" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://api.lab.test/)"
heal proxy-open
check "heal proxy-open: CONNECT blocked.lab.test 403" "000/403" "$(curl_code -k -x "$LAB_PROXY_URL" https://blocked.lab.test/)"
check "  allowed 200 after heal" "200/200" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://api.lab.test/)"

brk dns-open
# a forwarder: what the authority says comes back, and the authority saw it
check "break dns-open: blocked.lab.test answered (forwarded)" "NOERROR 10.99.20.20" "$(dnsq blocked.lab.test A --server "$RESOLVER_IP4")"
check "  $RANDNAME.$CANARY_ZONE answered (canary)" "NOERROR $DNS_OPEN_IP6" "$(dnsq "$RANDNAME.$CANARY_ZONE" AAAA --server "$RESOLVER_IP6")"
check "  $RANDNAME.lab.test NXDOMAIN relayed" NXDOMAIN "$(dnsq "$RANDNAME.lab.test" A --server "$RESOLVER_IP4")"
check "  ... and the authority saw it" 1 "$(grep -c " $RANDNAME.lab.test " "$LAB_DIR/dns/queries.log")"
check "  api.lab.test still right" "NOERROR 10.99.10.10" "$(dnsq api.lab.test A --server "$RESOLVER_IP4")"
heal dns-open
check "heal dns-open: blocked.lab.test REFUSED" REFUSED "$(dnsq blocked.lab.test A --server "$RESOLVER_IP4")"

brk allowed-down
check "break allowed-down: CONNECT api -> 500" "000/500" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://api.lab.test/)"
check_match "  tinyproxy says Unable to connect" "500 Unable to connect" "$(sbx curl -sS --max-time 5 -v -x "$LAB_PROXY_URL" http://git.lab.test/ 2>&1 | grep '^< HTTP' | tr -d '\r')"
heal allowed-down
check "heal allowed-down: api via proxy 200" "200/200" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://api.lab.test/)"
check "  git via proxy 200" "200/200" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://git.lab.test/)"

# flush-rule: each flushed rule makes exactly its own destination answer
flush_test() { # flush_test RULE
  local r=$1 pred
  FLUSHED=$r
  open_if_rule() { local rr; rr=$(rule_of "$1"); [ "$2" = 6 ] && rr="${rr}6"; [ "$rr" = "$FLUSHED" ]; }
  brk flush-rule "$r"
  expect_sweep "break flush-rule $r" open_if_rule
  heal flush-rule "$r"
}
if [ -n "$FULL" ]; then
  FLUSH_LIST=$(for t in "${TARGETS[@]}"; do read -r key fam _ <<<"$t"; r=$(rule_of "$key"); [ "$fam" = 6 ] && r="${r}6"; echo "$r"; done | awk '!s[$0]++')
else
  FLUSH_LIST="deny-raw-reset deny-raw-admin-prohibited6 deny-metadata deny-exfil6 deny-direct-allowed6 default-deny"
fi
for r in $FLUSH_LIST; do flush_test "$r"; done
brk flush-rule allow-proxy
check "break flush-rule allow-proxy: proxy unreachable" "000/000" "$(curl_code --connect-timeout 2 --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://api.lab.test/)"
heal flush-rule allow-proxy
brk flush-rule allow-dns
check "break flush-rule allow-dns: v4 resolver times out" TIMEOUT "$(dnsq api.lab.test A --server "$RESOLVER_IP4" --timeout 1)"
check "  v6 resolver still answers" "NOERROR 10.99.10.10" "$(dnsq api.lab.test A --server "$RESOLVER_IP6")"
heal flush-rule allow-dns
check "lab break unknown state is refused" 1 "$("$LAB" break nonsense >/dev/null 2>&1; echo $?)"
check "lab break flush-rule NOSUCH is refused" 1 "$("$LAB" break flush-rule no-such-rule >/dev/null 2>&1; echo $?)"
brk egress-open; brk dns-open; brk flush-rule deny-raw-drop
check_match "lab status lists broken states" "egress-open, dns-open, flush-rule deny-raw-drop" "$("$LAB" status | grep '^broken')"
heal
check "lab heal (all) -> healthy" "broken: none (healthy)" "$("$LAB" status | grep '^broken')"
expect_sweep "after heal all: every direct target fails as intended" none_open
check "after heal all: allowed via proxy" "200/200" "$(curl_code --cacert "$LAB_CA" -x "$LAB_PROXY_URL" https://git.lab.test/)"

# ------------------------------------------------------------------ down
# leave a stray process in the sandbox: down must kill it too
sbx sleep 300 </dev/null >/dev/null 2>&1 &
sleep 0.1
t0=$(now)
"$LAB" down
t1=$(now)
DOWN_T=$(elapsed "$t0" "$t1")
record PASS "lab down" "${DOWN_T}s"
left=""
for ns in "${LAB_NAMESPACES[@]}"; do [ -e "/run/netns/$ns" ] && left+=" netns:$ns"; [ -e "/etc/netns/$ns" ] && left+=" /etc/netns/$ns"; done
[ -e "$LAB_DIR" ] && left+=" $LAB_DIR"
[ -e "$LAB_DIR.lock" ] && left+=" $LAB_DIR.lock"
lab_root_links | grep -q . && left+=" root-links"
check "down leaves nothing (netns, files, links)" "" "$left"
wait 2>/dev/null
check "down killed processes in lab namespaces" "" "$(jobs -r)"
check "lab down again is harmless" 0 "$("$LAB" down >/dev/null 2>&1; echo $?)"
check "lab status after down" "lab: down" "$("$LAB" status)"

if [ -n "$KEEP" ] || [ -n "$WAS_UP" ]; then "$LAB" up; fi

# ------------------------------------------------------------------ report
echo
echo "sandprobe lab selftest"
echo "----------------------"
printf '%s\n' "${RESULTS[@]}"
echo
echo "timings: lab up ${UP_COLD}s (cold), ${UP_AGAIN}s (over a running lab); lab down ${DOWN_T}s"
echo "selftest: $PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
