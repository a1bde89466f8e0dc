// Package manifest reads Kubernetes manifest streams the way kubectl reads
// them, fast: drift -f's reading, behind one seam so that drift's rules
// read plainly.
//
//   - Stream (and Split) cut a file into documents as kubectl's
//     YAMLOrJSONDecoder does: JSON values, YAML documents, or JSON then
//     YAML, with the line each starts on (stream.go, json.go).
//   - Parse reads a document of the plain block-YAML subset that tools
//     write (yaml.Marshal, kubectl -o yaml) into a tree that carries every
//     key's and item's line; BlockToJSON writes its JSON byte for byte as
//     sigs.k8s.io/yaml would, and Decode fills a typed object straight
//     from it (block.go, decode.go). Anything outside the subset is
//     ErrNotPlain: the caller reads that document with the reference
//     reader, sigs.k8s.io/yaml, after SameJSONKey (keys.go), which
//     reads it only when a key might not be a string.
//   - Node.Line and Walk find the line of a finding's field path, in the
//     tree or in yaml.v3's nodes (Object) when the fast reader did not
//     read the document (lines.go).
//
// The hand-written reader stays because it pays: drift -f reads
// yaml.Marshal-shaped files about four times faster end to end with it
// than with sigs.k8s.io/yaml alone (docs/fleet.md, "The manifest
// reader"). The fuzzers (FuzzBlockYAML, FuzzDecodeNode, FuzzDocStream,
// FuzzStringKeysOnly) hold it to the reference reader and to kubectl's splitting; drift's
// FuzzJudged holds the verdicts.
package manifest
