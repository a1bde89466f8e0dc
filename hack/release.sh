#!/usr/bin/env bash
# make release VERSION=vX.Y.Z: everything a release publishes, built from
# this checkout into out/release/VERSION (RELEASE_OUT=DIR for another root):
#
#   sandprobe-VERSION-OS-ARCH            the CLI, for linux and darwin (macOS:
#                                        the offline commands, validate, render,
#                                        drift, checks, and the kube and docker
#                                        backends; the probe and the local
#                                        backend need Linux)
#   sandprobe-probe-VERSION-linux-ARCH   the in-sandbox probe (Linux only)
#   *.cdx.json                           a CycloneDX SBOM of each binary's Go
#                                        modules, read from its build info
#                                        (hack/sbom, internal/sbom)
#   sandprobe-VERSION-image.tar          the OCI image (make image: both
#                                        linux platforms under one index)
#   image-digest.txt                     REPO:VERSION@sha256:… to pin it by
#   sandprobe-CHART.tgz                  the Helm chart, its default image this
#                                        release's, by digest (chart version
#                                        VERSION without the v)
#   sha256sums.txt                       `sha256sum -c sha256sums.txt` checks all
#
# Every binary is stamped with VERSION, the commit and the commit's time
# (SOURCE_DATE_EPOCH) and built with -trimpath and no build ID, so one
# commit and one VERSION give the same bytes (and the same image digest).
#
#   PLATFORMS="linux/amd64" hack/release.sh   fewer platforms (the test's)
#   NO_IMAGE=1 hack/release.sh                no image (and so no chart)
#   NO_CHART=1 hack/release.sh                no chart (helm is built into the
#                                             cache otherwise: hack/helm/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
version=${VERSION:-}
if [[ ! $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION must be a semantic version tag vX.Y.Z[-pre], got '${version}' (make release VERSION=v0.1.0)" >&2
  exit 2
fi
platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
repo=${IMAGE_NAME:-ghcr.io/sandprobe/sandprobe}
commit=${COMMIT:-$(git rev-parse HEAD)}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
date=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
pkg=github.com/sandprobe/sandprobe/internal/version
ldflags="-s -w -buildid= -X $pkg.version=$version -X $pkg.commit=$commit -X $pkg.date=$date"
out=${RELEASE_OUT:-out/release}/$version
export VERSION=$version COMMIT=$commit SOURCE_DATE_EPOCH=$epoch

log() { printf '[release %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
if [[ -n $(git status --porcelain 2>/dev/null) ]]; then
  log "warning: the work tree has uncommitted changes; the binaries say commit $commit all the same"
fi

rm -rf "$out"
mkdir -p "$out"
trap 'rm -rf "$out"/.image.* "$out"/.chart.*' EXIT
sbom_tool="$out/.sbom"
"$go" build -o "$sbom_tool" ./hack/sbom
linux=()
for p in $platforms; do
  os=${p%/*} arch=${p#*/}
  cmds=(sandprobe)
  if [[ $os == linux ]]; then cmds+=(sandprobe-probe); linux+=("$p"); fi
  for cmd in "${cmds[@]}"; do
    bin="$cmd-$version-$os-$arch"
    log "build $bin"
    GOOS=$os GOARCH=$arch CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$out/$bin" "./cmd/$cmd"
    "$sbom_tool" --name "$cmd" --version "$version" --created "$epoch" "$out/$bin" >"$out/$bin.cdx.json"
  done
done
rm -f "$sbom_tool"

if [[ -z ${NO_IMAGE:-} && ${#linux[@]} -gt 0 ]]; then
  log "image for ${linux[*]} (hack/image.sh)"
  tmp=$(mktemp -d "$out/.image.XXXXXX")
  IMAGE_OUT=$tmp PLATFORMS="${linux[*]}" IMAGE_NAME=$repo IMAGE_TAG=$version GO=$go hack/image.sh >/dev/null
  mv "$tmp/image.tar" "$out/sandprobe-$version-image.tar"
  echo "$repo:$version@$(cat "$tmp/digest")" >"$out/image-digest.txt"
  rm -rf "$tmp"
fi

if [[ -z ${NO_CHART:-} && -f $out/image-digest.txt ]]; then
  hack/helm/build.sh
  helm=$(hack/helm/build.sh --print-bin)
  digest=$(sed 's/.*@//' "$out/image-digest.txt")
  log "chart $version (image @$digest)"
  chart=$(mktemp -d "$out/.chart.XXXXXX")
  cp -r charts/sandprobe "$chart/"
  # The chart's defaults pin this release's image: tag and digest.
  sed -i -e "s|^  repository: .*|  repository: $repo|" -e "s|^  tag: .*|  tag: $version|" -e "s|^  digest: .*|  digest: $digest|" "$chart/sandprobe/values.yaml"
  "$helm" lint --strict "$chart/sandprobe" >/dev/null
  "$helm" package "$chart/sandprobe" --version "${version#v}" --app-version "$version" --destination "$out" >/dev/null
  rm -rf "$chart"
fi

# shellcheck disable=SC2094 # find skips sha256sums.txt, the file it writes
(cd "$out" && find . -maxdepth 1 -type f ! -name sha256sums.txt -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >sha256sums.txt)
log "release $version (commit $commit) in $out"
if ! git rev-parse -q --verify "refs/tags/$version" >/dev/null; then
  log "not tagged yet: git tag -s $version $commit && git push origin $version"
fi
[[ -f $out/image-digest.txt ]] && cat "$out/image-digest.txt"
exit 0
