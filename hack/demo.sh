#!/usr/bin/env bash
# make demo: a healthy local sandbox and a sabotaged one, side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "demo: needs root (it builds sandboxes with namespaces)" >&2; exit 1; }
out=${DEMO_OUT:-out/demo}
mkdir -p "$out"

echo "▶ 1. a healthy sandbox, built from fixtures/local-policy.yaml"
bin/sandprobe run --policy fixtures/local-policy.yaml --junit "$out/healthy.xml" --metrics-file "$out/healthy.prom" || true
echo
echo "▶ 2. the same sandbox, sabotaged: writable root, uid 0, a token and a key in the environment"
set +e
bin/sandprobe run --policy fixtures/local-policy.yaml --sabotage writable-root,root-uid,token,env-secret --junit "$out/sabotaged.xml" --metrics-file "$out/sabotaged.prom"
code=$?
set -e
echo
echo "exit code $code (1 = not conformant); JUnit in $out/"
echo
echo "▶ 3. what Prometheus sees (node_exporter textfile format, written atomically)"
for f in healthy sabotaged; do
  echo "── $out/$f.prom"
  grep -E '^sandprobe_(up|egress_unexpected_open|egress_allowed_unreachable) ' "$out/$f.prom" || true
  grep -E '^sandprobe_check_success.* 0$' "$out/$f.prom" || echo "  (every evaluated check passes)"
  grep -qE '^sandprobe_egress_unexpected_open' "$out/$f.prom" ||
    echo "  (no sandprobe_egress_unexpected_open: this policy declares no egress, so no egress check ran)"
done
if command -v promtool >/dev/null; then
  promtool check metrics <"$out/sabotaged.prom" && echo "promtool check metrics: ok"
fi
