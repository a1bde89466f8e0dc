#!/usr/bin/env bash
# Builds kube-score (the peer `make bench` measures drift -f against) from
# its module on the Go module proxy into the cache, once: a warm run finds
# the binary and builds nothing. Prints the binary's path.
#   hack/kube-score.sh            build if missing, print the path
set -euo pipefail
VERSION=v1.20.0
CACHE=${SANDPROBE_CACHE:-/var/cache/sandprobe}
DIR=$CACHE/kube-score/$VERSION
BIN=$DIR/kube-score
if [[ ! -x $BIN ]]; then
	mkdir -p "$DIR"
	# go install pkg@version builds in module mode, outside this module's go.mod.
	echo "kube-score: building github.com/zegl/kube-score $VERSION into $DIR (once)" >&2
	tmp=$(mktemp -d "$DIR/.build-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	CGO_ENABLED=0 GOBIN=$tmp GOFLAGS=-mod=mod go install -trimpath \
		"github.com/zegl/kube-score/cmd/kube-score@$VERSION" >&2
	mv "$tmp/kube-score" "$BIN"
fi
echo "$BIN"
