//go:build !sandprobe_referenceyaml

package drift

// fastYAML says whether documents are read by the block-YAML reader
// (fastyaml.go, fastdecode.go) before the reference reader
// (sigs.k8s.io/yaml). Building with -tags sandprobe_referenceyaml turns it
// off, so hack/bench.sh can measure what the fast reader earns
// (TestBenchManifestReader, BenchmarkReadManifests).
const fastYAML = true
