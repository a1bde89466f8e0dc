#!/usr/bin/env bash
# make verify's body: regenerate what is generated from the code (the check
# reference docs/checks.md, the drift rules table in docs/drift.md, the
# fixture files under fixtures/drift) and fail if that changed anything:
# the checked-in copies must be what the code makes. The Docker inspect
# fixtures need the test engine and are left to make fixtures.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
go=${GO:-go}
generated=(docs/checks.md docs/drift.md fixtures/drift)
status=0
"$go" run ./cmd/sandprobe checks -o markdown >docs/checks.md || status=1
"$go" test -count=1 ./drift -run '^(TestDocsRules|TestFixtures)$' -update >/dev/null || status=1
if ((status != 0)); then
  echo "verify: regenerating failed" >&2
  exit 1
fi
changed=$(git status --porcelain -- "${generated[@]}")
if [[ -n $changed ]]; then
  printf 'verify: the generated files differ from what is checked in (commit them, or fix the code):\n%s\n' "$changed" >&2
  git --no-pager diff --stat -- "${generated[@]}" >&2
  exit 1
fi
echo "verify: ${generated[*]} are what the code generates"
