#!/usr/bin/env bash
# make down: stop every test environment the project starts — the cluster
# (with kube-router), the network lab, the private Docker engine — except
# what SANDPROBE_KEEP names ("docker lab", "cluster", "all"; spaces or
# commas). `make test` runs it at its end, then hack/leftovers.sh.
#
# The cluster and the lab are shared by every test on this machine: each is
# torn down holding its test lock (cluster first, then lab, the order every
# test takes them), so a test that is using one finishes first. Caches and
# images stay (/var/cache/sandprobe, /var/lib/sandprobe-docker). Root.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "down: needs root" >&2; exit 1; }

keep=${SANDPROBE_KEEP:-}
keep=" ${keep//,/ } "
kept() { [[ $keep == *" $1 "* || $keep == *" all "* ]]; }
status=0

if kept cluster; then
  echo "down: keeping the cluster (SANDPROBE_KEEP)"
elif [[ -d ${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster} || -d ${SANDPROBE_CLUSTER_DATA_DIR:-/var/lib/sandprobe-cluster} ]]; then
  echo "down: the cluster (hack/cluster/down.sh)"
  flock /run/sandprobe-cluster.test-lock hack/cluster/down.sh >/dev/null || { echo "down: hack/cluster/down.sh failed" >&2; status=1; }
fi
if ! kept cluster; then
  # make e2e's Pushgateway on the node address (hack/e2e.sh), left running
  # with the cluster by SANDPROBE_E2E_KEEP: found by its exact command line.
  for f in /proc/[0-9]*/cmdline; do
    if [[ "$(tr '\0' ' ' 2>/dev/null <"$f")" == *"prometheus-pushgateway --web.listen-address=10.250.0.1:19091 "* ]]; then
      pid=${f#/proc/}; pid=${pid%/cmdline}
      echo "down: e2e's Pushgateway (pid $pid)"
      kill "$pid" 2>/dev/null || true
    fi
  done
fi

if kept lab; then
  echo "down: keeping the network lab (SANDPROBE_KEEP)"
elif [[ -d ${SANDPROBE_LAB_DIR:-/run/sandprobe-lab} ]] || ls /run/netns/sp-* &>/dev/null; then
  echo "down: the network lab (hack/lab/lab down)"
  flock /run/sandprobe-lab.test-lock hack/lab/lab down >/dev/null || { echo "down: lab down failed" >&2; status=1; }
fi

if kept docker; then
  echo "down: keeping the Docker engine (SANDPROBE_KEEP)"
elif [[ -d /run/sandprobe-docker ]]; then
  echo "down: the Docker engine (hack/docker/down.sh)"
  hack/docker/down.sh >/dev/null || { echo "down: hack/docker/down.sh failed" >&2; status=1; }
fi
exit "$status"
