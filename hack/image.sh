#!/usr/bin/env bash
# make image: sandprobe's OCI image, built in code (hack/image,
# internal/image on go-containerregistry; no Docker daemon, no registry).
# Both static binaries for each platform, on an empty base, as 65532:65532,
# with the build host's CA bundle (Debian's ca-certificates), one index for
# linux/amd64 and linux/arm64. Reproducible: the binaries are built with
# -trimpath and no build ID, stamped with the commit and its time
# (SOURCE_DATE_EPOCH), and every layer entry, config and history entry
# carries that time, so two builds of one commit give one digest.
#
#   hack/image.sh                       -> out/image/{oci/,image.tar,digest}
#   PLATFORMS="linux/amd64" hack/image.sh
#   IMAGE_OUT=DIR IMAGE_NAME=REPO VERSION=v0.1.0 hack/image.sh
#
# out/image/oci is an OCI image layout; out/image/image.tar is that layout
# plus Docker's manifest.json, so `ctr images import` and `docker load`
# (this host's platform) both take it. It prints the index's digest: pin
# the image by it (REPO@sha256:…).
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
out=${IMAGE_OUT:-out/image}
platforms=${PLATFORMS:-linux/amd64 linux/arm64}
repo=${IMAGE_NAME:-ghcr.io/sandprobe/sandprobe}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
date=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
tag=${IMAGE_TAG:-$version}
pkg=github.com/sandprobe/sandprobe/internal/version
ldflags="-s -w -buildid= -X $pkg.version=$version -X $pkg.commit=$commit -X $pkg.date=$date"

args=()
for p in $platforms; do
  os=${p%/*} arch=${p#*/}
  dir="$out/bin/${os}_${arch}"
  mkdir -p "$dir"
  for cmd in sandprobe sandprobe-probe; do
    GOOS=$os GOARCH=$arch CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$dir/$cmd" "./cmd/$cmd"
  done
  args+=(--platform "$p=$dir")
done
"$go" run ./hack/image build --out "$out" --name "$repo:$tag" --created "$epoch" "${args[@]}" \
  --label "org.opencontainers.image.title=sandprobe" \
  --label "org.opencontainers.image.description=Proves, continuously, that sandboxes are as tight as their policy declares" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$commit" \
  --label "org.opencontainers.image.created=$date" \
  --label "org.opencontainers.image.source=https://github.com/sandprobe/sandprobe" \
  --label "org.opencontainers.image.licenses=Apache-2.0"
