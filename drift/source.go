package drift

import (
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/sandprobe/sandprobe/internal/manifest"
	"github.com/sandprobe/sandprobe/report"
)

// This file gives findings on objects read from files their place: the file
// and the line of the field to fix (or of the object, when the field is
// absent — a missing runAsNonRoot lands on the container that lacks it), so
// SARIF can annotate a pull request on that line.

// origin is where one object was read: its file, the document and, for an
// item of a List, the item's index path inside it.
type origin struct {
	file  string
	doc   *manifest.Document
	items []int
	node  *yaml.Node // parsed on first use
	parse sync.Once
	// lite is the document's line tree from the block-YAML reader, when
	// it read the document: Locate walks it instead of parsing the
	// document again with yaml.v3.
	lite *liteTree
}

// liteTree is a document's line tree from the block-YAML reader: kept
// from the reading (drift -f's pods, read and located together), or read
// again on first use (what drift -f's first pass keeps: the trees of
// every policy and workload held from the first pass through the second
// were most of its live heap, and the collector paid for them on every
// cycle, while few of them are ever asked for a line). Items of a List
// share their document's.
type liteTree struct {
	once sync.Once
	node *manifest.Node
}

// tree is the document's tree, parsed from data the first time when it
// was not kept.
func (t *liteTree) tree(data []byte) *manifest.Node {
	t.once.Do(func() {
		if t.node == nil {
			t.node, _ = manifest.Parse(data)
		}
	})
	return t.node
}

// origins maps the objects read from files, by the name findings give
// them ("pod/ns/name", "networkpolicy/ns/name", "adminnetworkpolicy/name"),
// to where they were read.
type origins map[string]*origin

func (s origins) add(key string, src *origin) {
	if src == nil || src.file == "" {
		return
	}
	if _, dup := s[key]; !dup {
		s[key] = src
	}
}

// Locate fills in File and Line of the findings on objects read from m's
// files: the line of the field named in the finding's subject, or of the
// nearest enclosing field that is written there. Findings on other objects
// are left as they are.
func (m *Manifests) Locate(fs []report.Finding) {
	for i := range fs {
		key, path := findingObject(&fs[i])
		src := m.origins[key]
		if src == nil {
			continue
		}
		fs[i].File, fs[i].Line = src.file, src.line(path)
	}
}

// policyKinds are the kinds whose findings name the policy in the subject
// ("networkpolicy/allow-all spec.egress[0].to[0]"): the line to fix is in
// that policy, not in the pod it selects.
var policyKinds = map[string]bool{
	"networkpolicy": true, "ciliumnetworkpolicy": true, "ciliumclusterwidenetworkpolicy": true,
	"adminnetworkpolicy": true, "baselineadminnetworkpolicy": true, "clusternetworkpolicy": true,
}

// findingObject is the object a finding asks to change, as a sources key,
// and the field path inside it.
func findingObject(f *report.Finding) (key, path string) {
	if obj, rest, ok := strings.Cut(f.Subject, " "); ok {
		if kind, name, ok := strings.Cut(obj, "/"); ok && policyKinds[kind] {
			if kind == "networkpolicy" && !strings.Contains(name, "/") {
				// NetworkPolicies select pods of their own namespace only.
				obj = kind + "/" + f.Namespace + "/" + name
			}
			return obj, rest
		}
	}
	return f.Target, f.Subject
}

// line is the line of path inside the object: the deepest part of it that
// the file spells out.
func (s *origin) line(path string) int {
	if lite := s.liteTree(); lite != nil {
		// A List's item: the same path under its items.
		for i := len(s.items) - 1; i >= 0; i-- {
			item := "items[" + strconv.Itoa(s.items[i]) + "]"
			if path == "" {
				path = item
			} else {
				path = item + "." + path
			}
		}
		return s.doc.Line + lite.Line(path) - 1
	}
	root := s.root()
	if root == nil {
		return s.doc.Line
	}
	return s.doc.Line + manifest.Walk(root, path).Line - 1
}

// liteTree is the block-YAML reader's tree of the document, or nil when
// that reader did not read it.
func (s *origin) liteTree() *manifest.Node {
	if s.lite == nil {
		return nil
	}
	return s.lite.tree(s.doc.Data)
}

// root parses the object's document (once) and finds the object in it.
// A policy's origin is read by every pod checked in parallel (FileScan):
// the first to need it parses it.
func (s *origin) root() *yaml.Node {
	s.parse.Do(func() { s.node = manifest.Object(s.doc.Data, s.items) })
	return s.node
}
