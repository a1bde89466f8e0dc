#!/usr/bin/env bash
# make demo: a healthy local sandbox and a sabotaged one, side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "demo: needs root (it builds sandboxes with namespaces)" >&2; exit 1; }
out=${DEMO_OUT:-out/demo}
mkdir -p "$out"

echo "▶ 1. a healthy sandbox, built from fixtures/local-policy.yaml"
bin/sandprobe run --policy fixtures/local-policy.yaml --junit "$out/healthy.xml" || true
echo
echo "▶ 2. the same sandbox, sabotaged: writable root, uid 0, a token and a key in the environment"
set +e
bin/sandprobe run --policy fixtures/local-policy.yaml --sabotage writable-root,root-uid,token,env-secret --junit "$out/sabotaged.xml"
code=$?
set -e
echo
echo "exit code $code (1 = not conformant); JUnit in $out/"
