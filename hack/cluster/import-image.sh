#!/usr/bin/env bash
# Put a container image in the test cluster's containerd (namespace k8s.io),
# since the cluster can pull from no registry.
#
#   hack/cluster/import-image.sh NAME:TAG ROOTFS [ENTRYPOINT...]
#   hack/cluster/import-image.sh --archive FILE
#
# ROOTFS is a directory, a tar (optionally gzip-compressed), or a single
# executable file (it becomes /<basename> in an otherwise empty image with
# the usual mount points); ENTRYPOINT defaults to none (the pod must then
# set `command`). The image is built in code (go run ./hack/image rootfs,
# internal/image on go-containerregistry; reproducible: same input, same
# digest). --archive imports an image archive as it is (make image's
# out/image/image.tar, named by its own index). Pods use the image with
# `imagePullPolicy: Never`. NAME is normalized like Kubernetes does
# (probe:1 -> docker.io/library/probe:1), so pods can refer to it by the
# short name.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if (($# < 2)); then
  sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
[[ -S $CONTAINERD_SOCK ]] || die "containerd of the test cluster is not running (hack/cluster/up.sh)"

if [[ $1 == --archive ]]; then
  [[ -f $2 ]] || die "$2: no such image archive"
  ctrc images import "$2"
  exit 0
fi
ref="$1" src="$(realpath -e -- "$2")" || die "$2: no such file or directory"
shift 2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
(cd "$root" && "${GO:-go}" run ./hack/image rootfs --name "$ref" --out "$work/image.tar" "$src" "$@") >"$work/built" ||
  die "could not build the image $ref from $src"
ctrc images import "$work/image.tar" >/dev/null
read -r name digest <"$work/built"
echo "imported $name ($digest)"
