#!/usr/bin/env bash
# make demo: the story sandprobe exists for, in the network lab (hack/lab).
#   lab up → a healthy run → a "CNI regression" (one nft rule deleted) →
#   the next run catches it (exit 1, JUnit and metrics written) → lab down.
# Root required. Cleans up after itself, also when interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "demo: needs root (network namespaces, nftables)" >&2; exit 1; }

out=${DEMO_OUT:-out/demo}
policy=fixtures/lab-policy.yaml
lab=hack/lab/lab
bold=$'\e[1m' dim=$'\e[2m' red=$'\e[31m' reset=$'\e[0m'
[[ -t 1 && -z ${NO_COLOR:-} ]] || bold='' dim='' red='' reset=''
step() { printf '\n%s▶ %s%s\n' "$bold" "$*" "$reset"; }

# SANDPROBE_KEEP=lab (or all) leaves the lab up for a look afterwards.
keep_lab=0
case " ${SANDPROBE_KEEP:-} " in *" all "* | *lab*) keep_lab=1 ;; esac
cleanup() {
  local code=$?
  [[ $keep_lab == 1 ]] || "$lab" down >/dev/null 2>&1 || true
  exit "$code"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted, tearing the lab down"; exit 130' INT TERM

# The lab is shared with every test on this machine (internal/testenv.Lab):
# hold its lock while the demo breaks it and tears it down. The lab's daemons
# close inherited descriptors, so the lock ends with this script.
exec {lab_lock}>/run/sandprobe-lab.test-lock
if ! flock -n "$lab_lock"; then
  echo "demo: waiting for the network lab (a test holds /run/sandprobe-lab.test-lock)"
  flock "$lab_lock"
fi

mkdir -p "$out"
rm -f "$out"/*.xml "$out"/*.prom "$out"/*.json
start=$(date +%s.%N)

step "1. bring up the network lab: a sandbox namespace, a router with nftables rules, allowed hosts, a proxy, a resolver"
"$lab" up >/dev/null
"$lab" status | sed -n '1,2p' | sed "s/^/  $dim/; s/$/$reset/"

step "2. probe the healthy sandbox ($policy); the lab's control namespace dials every must-fail target too, so each deny is proven"
bin/sandprobe run --backend local --netns sp-sandbox --control-netns sp-control --policy "$policy" \
  --junit "$out/healthy.xml" --json "$out/healthy.json" --metrics-file "$out/healthy.prom"

rule=default-deny
step "3. a \"CNI regression\": the nft rule '$rule' disappears (what a CNI upgrade or a rule widened \"for a minute\" does)"
"$lab" rules | grep -E "^$rule " | sed "s/^/  $dim/; s/$/$reset/"
"$lab" break flush-rule "$rule" >/dev/null
echo "  ${red}deleted${reset} — nothing fails loudly: the sandbox keeps working"

step "4. the next run catches it"
set +e
bin/sandprobe run --backend local --netns sp-sandbox --control-netns sp-control --policy "$policy" \
  --junit "$out/regressed.xml" --json "$out/regressed.json" --metrics-file "$out/regressed.prom"
code=$?
set -e

step "5. what CI and Prometheus see"
printf '  exit code: %s%d%s (1 = not conformant)\n' "$red" "$code" "$reset"
for f in healthy regressed; do
  v=$(awk '/^sandprobe_egress_unexpected_open\{/ { s += $NF } END { print s + 0 }' "$out/$f.prom")
  u=$(awk '/^sandprobe_egress_denies_unproven\{/ { s += $NF } END { print s + 0 }' "$out/$f.prom")
  printf '  %-10s sandprobe_egress_unexpected_open = %s, sandprobe_egress_denies_unproven = %s\n' "$f" "$v" "$u"
done
printf '  JUnit failures: %s\n' "$(grep -o 'failures="[0-9]*"' "$out/regressed.xml" | head -1)"
printf '  files: %s\n' "$(cd "$out" && printf '%s ' *)"

if [[ $keep_lab == 1 ]]; then
  step "6. the lab stays up (SANDPROBE_KEEP=lab): hack/lab/lab status, make down when done"
else
  step "6. tear the lab down"
  "$lab" down >/dev/null
fi
printf '  done in %.1fs\n' "$(echo "$(date +%s.%N) - $start" | awk '{ print $1 - $3 }')"
[[ $code == 1 ]] || { echo "demo: expected the regressed run to exit 1, got $code" >&2; exit 1; }
# Nothing of the lab outlives the demo (SANDPROBE_KEEP=lab aside). Checked
# while the demo still holds the lab's lock, so a test that takes the lab
# next cannot be mistaken for a leftover of the demo.
hack/leftovers.sh lab
