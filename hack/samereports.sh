#!/usr/bin/env bash
# Proves a change altered no report: builds `sandprobe` at REV (default: the
# merge base with main) and from the work tree, runs both over every fixture
# policy × every fixture manifest and docker inspect file, generated pods
# (drift/testdata/genpods) and random pods, workloads and containers
# (drift/testdata/randpods, every rule field set or unset at random), in
# every -o format (text, json, junit, sarif) and --html, plus the catalogue
# listings, and compares the outputs byte for byte once run times and
# timestamps are masked. REV's outputs are kept in $TMPDIR between runs.
# Exit 0 when every output is identical.
#   hack/samereports.sh [REV]
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
rev=$(git rev-parse "${1:-$(git merge-base HEAD main)}")
cache=${TMPDIR:-/tmp}/samereports-$rev
work=$(mktemp -d "${TMPDIR:-/tmp}/samereports.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The inputs: the fixtures and generated files, copied once per REV so
# both builds read the same bytes at the same relative paths (reports name
# them).
inputs="$work/in"
mkdir -p "$inputs/gen"
cp -r fixtures "$inputs/fixtures"
go run ./drift/testdata/genpods -n 3000 -o "$inputs/gen/genpods.yaml"
go run ./drift/testdata/randpods -n 600 -seed 1 -o "$inputs/gen/randpods-1.yaml" -inspect "$inputs/gen/randcontainers-1.json"
go run ./drift/testdata/randpods -n 600 -seed 2 -o "$inputs/gen/randpods-2.yaml" -inspect "$inputs/gen/randcontainers-2.json"

run_all() { # binary outdir; from the inputs' copy
	local bin=$1 out=$2 n=0
	mkdir -p "$out"
	local -a ins=()
	for f in fixtures/drift/*.yaml gen/*.yaml; do ins+=("-f:$f"); done
	for f in fixtures/drift/docker/*.json gen/*.json; do ins+=("--inspect:$f"); done
	ins+=("-f:fixtures/drift") # a directory: every file at once
	for p in fixtures/*.yaml; do
		for in in "${ins[@]}"; do
			local flag=${in%%:*} file=${in#*:}
			local name
			name="$(basename "$p" .yaml).$(basename "$file")"
			for o in text json junit sarif; do
				local rc=0
				"$bin" drift --policy "$p" "$flag" "$file" -o "$o" >"$out/$name.$o" 2>"$out/$name.$o.err" || rc=$?
				echo "$rc" >"$out/$name.$o.rc"
				n=$((n + 1))
			done
			"$bin" drift --policy "$p" "$flag" "$file" --html "$out/$name.html" >/dev/null 2>&1 || true
		done
	done
	for o in text json markdown; do "$bin" checks -o "$o" >"$out/checks.$o"; done
	echo "$bin: $n drift runs" >&2
}

if [[ ! -f $cache/done ]]; then
	rm -rf "$cache"
	mkdir -p "$cache"
	git archive --format=tar "$rev" | (mkdir -p "$work/src" && tar -x -C "$work/src")
	(cd "$work/src" && go build -trimpath -o "$work/before" ./cmd/sandprobe)
	cp -r "$inputs" "$cache/in"
	(cd "$cache/in" && run_all "$work/before" "$cache/out")
	touch "$cache/done"
elif ! diff -r "$cache/in" "$inputs" >/dev/null; then
	echo "samereports: the fixtures or generated inputs changed since $cache was made; remove it and rerun" >&2
	exit 2
fi
go build -trimpath -o "$work/after" ./cmd/sandprobe
(cd "$cache/in" && run_all "$work/after" "$work/out")

# Run times and timestamps are the only parts that differ between runs.
mask() {
	sed -E '1s/  [0-9.]+(ms|µs|s|m[0-9.]+s)$/  DUR/
		s/"startedAt": "[^"]*"/"startedAt": "T"/
		s/^(\s*"[a-z]+": )[0-9]+\.[0-9]+(e-?[0-9]+)?(,?)$/\1F\3/
		s/ (time|timestamp)="[^"]*"/ \1="T"/g
		s/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+Z?( UTC)?/TIME/g
		s/[0-9]+(\.[0-9]+)? ?(ms|µs|s)\b/DUR/g' "$1"
}
fail=0 same=0
for f in "$cache/out"/*; do
	g="$work/out/$(basename "$f")"
	if [[ ! -f $g ]]; then
		echo "MISSING: $(basename "$f")"
		fail=1
		continue
	fi
	if cmp -s "$f" "$g" || cmp -s <(mask "$f") <(mask "$g"); then
		same=$((same + 1))
		continue
	fi
	echo "DIFFERS: $(basename "$f")"
	diff <(mask "$f") <(mask "$g") | head -10 || true
	fail=1
done
[[ $(find "$cache/out" -mindepth 1 -maxdepth 1 -name "[!.]*" | wc -l) == $(find "$work/out" -mindepth 1 -maxdepth 1 -name "[!.]*" | wc -l) ]] || { echo "samereports: the output sets differ"; fail=1; }
echo "samereports: $same outputs of $rev and the work tree compared: $([[ $fail == 0 ]] && echo identical || echo DIFFERENT)"
exit $fail
