//go:build sandprobe_referenceyaml

package drift

// fastYAML is off in this build: every document is read by the reference
// reader (sigs.k8s.io/yaml), and Locate parses it again with yaml.v3. Only
// for measuring the fast reader against it (reader_fast.go).
const fastYAML = false
