#!/usr/bin/env bash
# Turn a root filesystem into a container image in the test cluster's
# containerd (namespace k8s.io), since the cluster can pull from no registry.
#
#   hack/cluster/import-image.sh NAME:TAG ROOTFS [ENTRYPOINT...]
#
# ROOTFS is a directory, a tar (optionally gzip-compressed), or a single
# executable file (it becomes /<basename> in an otherwise empty image).
# ENTRYPOINT defaults to none (the pod must then set `command`).
# Pods use the image with `imagePullPolicy: Never`. NAME is normalized like
# Kubernetes does (probe:1 -> docker.io/library/probe:1), so pods can refer to
# it by the short name.
#
# Builds a one-layer OCI image archive by hand (uncompressed layer, config,
# manifest, index) and runs `ctr images import`, which also unpacks it for the
# overlayfs snapshotter.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if (($# < 2)); then
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
ref="$1" src="$2"; shift 2
[[ -S $CONTAINERD_SOCK ]] || die "containerd of the test cluster is not running (hack/cluster/up.sh)"

# Normalize like the CRI does: a first path component without '.' or ':'
# (and not localhost) means Docker Hub; a single component means library/.
name="${ref%@*}"
[[ $name == *:* && ${name##*/} == *:* ]] || name="$name:latest"
first="${name%%/*}"
if [[ $name != */* ]]; then
  name="docker.io/library/$name"
elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
  name="docker.io/$name"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/oci/blobs/sha256"
layer="$work/layer.tar"

# Reproducible tar flags: same input, same layer digest.
tar_flags=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner)
if [[ -d $src ]]; then
  tar "${tar_flags[@]}" -C "$src" -cf "$layer" .
elif [[ -f $src ]] && tar -tf "$src" &>/dev/null; then
  # A tar or tar.gz: use its content as the layer (uncompressed).
  if gzip -t "$src" 2>/dev/null; then gzip -dc "$src" > "$layer"; else cp "$src" "$layer"; fi
elif [[ -f $src && -x $src ]]; then
  mkdir "$work/rootfs"
  cp "$src" "$work/rootfs/$(basename "$src")"
  # Containers expect these mount points to exist on a read-only rootfs.
  mkdir -p "$work/rootfs/dev" "$work/rootfs/proc" "$work/rootfs/sys" "$work/rootfs/etc" "$work/rootfs/tmp"
  touch "$work/rootfs/etc/hosts" "$work/rootfs/etc/resolv.conf" "$work/rootfs/etc/hostname"
  chmod 1777 "$work/rootfs/tmp"
  tar "${tar_flags[@]}" -C "$work/rootfs" -cf "$layer" .
else
  die "$src is neither a directory, a tar file nor an executable"
fi

# blob FILE MEDIATYPE: store FILE as a blob, print its descriptor JSON.
blob() {
  local digest size
  digest="$(sha256sum "$1" | cut -d' ' -f1)"
  size="$(stat -c %s "$1")"
  mv "$1" "$work/oci/blobs/sha256/$digest"
  jq -cn --arg m "$2" --arg d "sha256:$digest" --argjson s "$size" \
    '{mediaType: $m, digest: $d, size: $s}'
}

diff_id="sha256:$(sha256sum "$layer" | cut -d' ' -f1)"
layer_desc="$(blob "$layer" application/vnd.oci.image.layer.v1.tar)"

jq -cn --arg diff "$diff_id" --args '{
  architecture: "amd64", os: "linux",
  config: ({
    Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    WorkingDir: "/"
  } + (if ($ARGS.positional | length) > 0 then {Entrypoint: $ARGS.positional} else {} end)),
  rootfs: {type: "layers", diff_ids: [$diff]},
  history: [{created_by: "hack/cluster/import-image.sh"}]
}' "$@" > "$work/config.json"
config_desc="$(blob "$work/config.json" application/vnd.oci.image.config.v1+json)"

jq -cn --argjson c "$config_desc" --argjson l "$layer_desc" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: $c, layers: [$l]
}' > "$work/manifest.json"
manifest_desc="$(blob "$work/manifest.json" application/vnd.oci.image.manifest.v1+json)"

# io.containerd.image.name makes ctr import store the image under that name.
jq -cn --argjson m "$manifest_desc" --arg n "$name" '{
  schemaVersion: 2,
  manifests: [$m + {annotations: {"io.containerd.image.name": $n, "org.opencontainers.image.ref.name": ($n | sub(".*:"; ""))}, platform: {architecture: "amd64", os: "linux"}}]
}' > "$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"

tar -C "$work/oci" -cf "$work/image.tar" oci-layout index.json blobs
ctrc images import "$work/image.tar" >/dev/null
echo "imported $name ($(jq -r .digest <<<"$manifest_desc"))"
