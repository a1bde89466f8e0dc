// Module clusterimages holds the tiny static programs that hack/cluster turns
// into container images (there is no registry to pull images from). It has no
// dependencies so it builds offline in about a second.
module sandprobe.dev/clusterimages

go 1.26.0
