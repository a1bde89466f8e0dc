#!/usr/bin/env bash
# make test's body: the test environments (built at once), make verify,
# then the whole suite against real parts with make lint and the fuzzers
# beside it (niced: the suite spends most of its time waiting on clusters
# and timeouts, and they take only the CPU it leaves), then the end-to-end
# story on a real cluster (make e2e), on kube-router and then on Cilium
# (make e2e CNI=cilium); whatever the outcome, make down and the leftovers
# check last, so nothing the run started outlives it (SANDPROBE_KEEP
# aside). A script rather than a make recipe: a recipe line that runs
# $(MAKE) is executed even by `make -n`.
#
# SANDPROBE_REQUIRE_ENV=1 turns a test that would skip for a missing
# environment (root, lab, Docker, apiserver) into a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
go=${GO:-go}
status=0
mkdir -p out
# Cilium's cold build (about 24 minutes of two cores) runs from the start,
# beside everything else, and takes only the CPU the rest leaves. Warm, it
# is a no-op. Its own session, so a failed run can stop the whole build
# (setsid); and a new session is a new scheduler autogroup, whose weight
# nice(1) does not touch: the kernel shares the CPU fairly between
# autogroups, so a build that was only `nice -n 19` in its own session
# took half the CPU from the suite (a cold CI run saw runner/kube pass its
# 30-minute timeout). Its autogroup is niced too (/proc/self/autogroup).
setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 hack/cluster/cilium.sh build' >out/cilium-build.log 2>&1 &
cilium_build=$!
# The environments, at once: cold, each is a Go build that waits on module
# downloads or a debootstrap that waits on the network, and together they
# keep both cores busy (warm, each is a no-op). Each one's output is in
# out/env-NAME.log, printed when it fails. golangci-lint is built by make
# lint itself, beside the suite.
declare -A env_pid
for e in images:hack/images/all.sh kube:hack/k8s/build.sh kwok:hack/kwok/build.sh helm:hack/helm/build.sh; do
  "${e#*:}" >"out/env-${e%%:*}.log" 2>&1 &
  env_pid[${e%%:*}]=$!
done
env_start=$SECONDS
for name in images kube kwok helm; do
  if ! wait "${env_pid[$name]}"; then
    printf 'test: the %s environment failed (out/env-%s.log):\n' "$name" "$name" >&2
    tail -n 30 "out/env-$name.log" >&2
    status=1
  fi
done
printf 'test: the environments took %ds (out/env-*.log)\n' $((SECONDS - env_start))
if ((status != 0)); then
  kill -- -"$cilium_build" 2>/dev/null; wait "$cilium_build" 2>/dev/null
  make down
  hack/leftovers.sh
  exit 1
fi
# Every step runs; a verify failure still lets the suite report. verify
# rewrites files in the tree that tests read: it runs first, alone.
GO="$go" hack/verify.sh || status=$?
# Lint and the fuzzers, one after the other, beside the suite; their
# output is printed once the suite is done, so the two do not mix.
(
  renice -n 19 -p "$BASHPID" >/dev/null 2>&1
  st=0
  GO="$go" hack/lint.sh || st=1
  make fuzz || st=1
  exit "$st"
) </dev/null >out/checks.log 2>&1 &
checks=$!
# runner/kube first: it is the suite's longest package (11 minutes in CI),
# and go test starts packages in the order given, so listed in its place
# it began a few minutes in and ended the suite alone. Its timeout leaves
# room for a cold machine, where every other package compiles beside it.
SANDPROBE_REQUIRE_ENV=1 SANDPROBE_BIN="$PWD/${BIN:-bin/sandprobe}" KUBEBUILDER_ASSETS=$(hack/k8s/build.sh --print-assets) \
  "$go" test -count=1 -timeout 45m ./runner/kube ./... || status=$?
wait "$checks" || { echo "test: make lint or make fuzz failed (out/checks.log)" >&2; status=1; }
cat out/checks.log
if ((status == 0)); then make e2e || status=$?; fi
if ((status != 0)); then
  kill -- -"$cilium_build" 2>/dev/null; wait "$cilium_build" 2>/dev/null
elif ! wait "$cilium_build"; then
  echo "test: hack/cluster/cilium.sh build failed (out/cilium-build.log):" >&2
  tail -n 20 out/cilium-build.log >&2
  status=1
fi
if ((status == 0)); then make e2e CNI=cilium || status=$?; fi
make down || status=1
hack/leftovers.sh || status=1
exit "$status"
