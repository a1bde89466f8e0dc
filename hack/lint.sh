#!/usr/bin/env bash
# make lint's body: gofmt, go vet, golangci-lint (.golangci.yml; the binary
# is built once into the cache by hack/golangci-lint/build.sh) and,
# over the shell scripts in hack/, shellcheck. Every step runs; the exit
# status is 1 if any of them found something.
#
#   hack/lint.sh            all four
#   hack/lint.sh --go       gofmt, go vet and golangci-lint only
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
go=${GO:-go}
status=0
step() { printf '[lint %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

step gofmt
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
  printf 'gofmt: these need formatting:\n%s\n' "$unformatted" >&2
  status=1
fi

step "go vet"
"$go" vet ./... || status=1

step golangci-lint
if bin=$(hack/golangci-lint/build.sh --print-bin) && hack/golangci-lint/build.sh; then
  "$bin" run ./... || status=1
else
  status=1
fi

if [[ ${1:-} != --go ]]; then
  step shellcheck
  # Every script in hack/: the *.sh files (the sourced libraries too) and
  # whatever else starts with a shell's #!.
  mapfile -t check < <({ find hack -type f -name '*.sh'; grep -rlE '^#!(/usr)?/bin/(env )?(ba)?sh' hack; } | LC_ALL=C sort -u)
  # -x -P SCRIPTDIR: follow what each script sources, found beside it.
  shellcheck -x -P SCRIPTDIR "${check[@]}" || status=1
fi
exit "$status"
