package drift

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"

	"github.com/sourcegraph/conc/stream"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/report"
)

// FileScan checks the manifests of drift -f without holding them: memory
// stays flat in the size of the files. Network policies, namespaces and
// templates must all be known before the first pod is judged, and a file
// may list them after its pods, so the files are read twice:
//
//  1. every document but a plain Pod is decoded and kept (policies,
//     namespaces, workload templates: a cluster has few of those); a
//     document whose top-level lines say `apiVersion: v1` and `kind: Pod`
//     is only counted;
//  2. the pod documents (and the Lists that held pods) are read again,
//     decoded in parallel and judged in file order, one at a time,
//     exactly as CheckManifests judges Manifests.Pods.
//
// Findings, their order, the notes and the first error are those of
// DecodeManifests followed by CheckManifests over the same files
// (TestFileScanMatchesManifests). Standard input is copied to an unlinked
// temporary file to be read twice. A single List document is decoded
// whole (`kubectl get pods -o yaml` writes one): stream multi-document
// YAML to keep memory flat.
type FileScan struct {
	Engine *Engine
	// Paths are files, directories (their .yaml, .yml and .json files, in
	// name order: ManifestFiles) and - for Stdin.
	Paths []string
	Stdin io.Reader
	// Namespace is where objects without metadata.namespace land.
	Namespace string
	// NamespaceLabels give namespaces' labels (Manifests.NamespaceLabels).
	NamespaceLabels map[string]map[string]string
	// Workers decode pods in parallel (0: GOMAXPROCS).
	Workers int
	// TempDir holds standard input's copy ("" is os.TempDir()).
	TempDir string

	// Recursive reads the subdirectories of a directory too (-R).
	Recursive bool

	// Pods counts the pod objects the files held (judged or not).
	Pods int
	// notes say what the directories held that was not read.
	notes []string
}

// scanSource is one file to read (twice).
type scanSource struct {
	name string
	open func() (io.ReadCloser, error)
}

// docPos orders errors: the first bad document in read order wins, as it
// would reading the files once.
type docPos struct{ src, doc int }

func (a docPos) before(b docPos) bool {
	return a.src < b.src || (a.src == b.src && a.doc < b.doc)
}

// Run reads the files and adds their findings to col.
func (s *FileScan) Run(col *Collector) error {
	m := &Manifests{Namespace: s.Namespace, NamespaceLabels: s.NamespaceLabels}
	m.Skipped = map[string]int{}
	var sources []scanSource
	var cleanup []func()
	defer func() {
		for _, c := range cleanup {
			c()
		}
	}()
	// podDocs are the documents pass 1 found pods in (Lists, JSON pods):
	// pass 2 decodes them again.
	podDocs := map[docPos]bool{}
	var firstErr error
	errPos := docPos{src: int(^uint(0) >> 1)}
	fail := func(pos docPos, err error) {
		firstErr, errPos = err, pos
	}

	// Pass 1.
pass1:
	for _, p := range s.Paths {
		srcs, clean, err := s.resolve(p)
		cleanup = append(cleanup, clean...)
		if err != nil {
			fail(docPos{src: len(sources)}, err)
			break
		}
		for _, src := range srcs {
			si := len(sources)
			sources = append(sources, src)
			doc, err := eachDocument(src, func(doc int, d *document) bool {
				if !d.json && looksLikePod(d.data) {
					s.Pods++
					return true
				}
				d = &document{data: bytes.Clone(d.data), line: d.line, json: d.json} // kept: origins point at it
				found := false
				m.onPod = func(*corev1.Pod, *origin) { found = true; s.Pods++ }
				if err := m.addDocument(d, src.name); err != nil {
					fail(docPos{si, doc}, fmt.Errorf("%s: document %d: %w", src.name, doc, err))
					return false
				}
				if found {
					podDocs[docPos{si, doc}] = true
				}
				return true
			})
			if err != nil && firstErr == nil {
				fail(docPos{si, doc}, err)
			}
			if firstErr != nil {
				break pass1
			}
		}
	}
	m.onPod = nil

	// Between the passes: the policies and templates, unless the files are
	// already known to be bad (a decode error comes first, as it would
	// reading once).
	var ts *Templates
	var setupErr error
	if firstErr == nil {
		ts, setupErr = m.prepare(s.Engine, col, s.Pods > 0)
	}
	judge := firstErr == nil && setupErr == nil
	if m.origins == nil {
		m.origins = origins{}
	}
	// Findings are located as they are added (the spool cannot be
	// changed afterwards), as CheckManifests locates them at its end.
	col.locate = m.Locate
	defer func() { col.locate = nil }()

	// Pass 2: the pods, up to the first bad document of pass 1 (an earlier
	// bad pod is the error to report).
	workers := s.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var podErr error
	var stop atomic.Bool
	st := stream.New().WithMaxGoroutines(workers)
	// Documents go to the workers in batches (a pod is tens of
	// microseconds of work: one task each was a tenth of it in hand-offs),
	// copied into one buffer per batch; results are added in file order.
	type job struct {
		doc   int
		d     *document
		cheap bool
	}
	var batch []job
	var buf []byte
	var batchSrc string
	flush := func() {
		jobs, source := batch, batchSrc
		batch, buf = nil, nil
		st.Go(func() stream.Callback {
			type done struct {
				pods []podAt
				err  error
			}
			out := make([]done, 0, len(jobs))
			for _, j := range jobs {
				pods, err := decodePods(j.d, source, s.Namespace, j.cheap)
				if err == nil && judge {
					// The rules and Locate only read the engine and the
					// origins of pass 1: they run here, in parallel.
					for i := range pods {
						pods[i].judge(s.Engine, m.origins)
					}
				}
				out = append(out, done{pods, err})
				if err != nil {
					break
				}
			}
			return func() {
				for k, r := range out {
					if stop.Load() {
						return
					}
					if r.err != nil {
						podErr = fmt.Errorf("%s: document %d: %w", source, jobs[k].doc, r.err)
						stop.Store(true)
						return
					}
					if judge {
						// In file order: what is reported once per run,
						// and what a template explains.
						for _, p := range r.pods {
							if p.sandbox {
								col.addLocated(ts.Pod(p.pod, s.Engine.settle(p.findings, p.once)))
							}
						}
					}
				}
			}
		})
	}
	const batchDocs, batchBytes = 16, 64 << 10
	for si, src := range sources {
		if stop.Load() || si > errPos.src {
			break
		}
		_, err := eachDocument(src, func(doc int, d *document) bool {
			pos := docPos{si, doc}
			if stop.Load() || !pos.before(errPos) {
				return false
			}
			cheap := !d.json && looksLikePod(d.data)
			if !cheap && !podDocs[pos] {
				return true
			}
			if buf == nil {
				buf = make([]byte, 0, max(batchBytes, len(d.data)))
			} else if len(buf)+len(d.data) > cap(buf) {
				flush()
				buf = make([]byte, 0, max(batchBytes, len(d.data)))
			}
			// The worker's copy: its own slice of the batch's buffer.
			at := len(buf)
			buf = append(buf, d.data...)
			batchSrc = src.name
			batch = append(batch, job{doc, &document{data: buf[at:len(buf):len(buf)], line: d.line, json: d.json}, cheap})
			if len(batch) == batchDocs {
				flush()
			}
			return true
		})
		if len(batch) > 0 {
			flush() // a batch holds one file's documents
		}
		if err != nil && firstErr == nil {
			// The file changed under us (or vanished) between the passes.
			st.Wait()
			return err
		}
	}
	st.Wait()
	switch {
	case podErr != nil:
		return podErr
	case firstErr != nil:
		return firstErr
	case setupErr != nil:
		return setupErr
	}
	m.checkClaims(s.Engine, col)
	if s.Pods == 0 {
		m.judgeEgressOnly(s.Engine, col)
	}
	for _, n := range s.notes {
		col.Note("%s", n)
	}
	s.Engine.NoteUndetermined(col)
	m.finish(ts, col)
	return nil
}

// podAt is a pod read in pass 2 and where it was written, then judged.
type podAt struct {
	pod *corev1.Pod
	at  *origin

	sandbox  bool // the policy governs it (checkFilePod)
	findings []report.Finding
	once     []onceSpan
}

// judge applies the rules to the pod, as checkFilePod does, and locates
// its findings: in the pod's own document, or in the policy of pass 1 that
// they name. Safe for concurrent use.
func (p *podAt) judge(e *Engine, others origins) {
	pod := p.pod
	if !e.IsSandbox(pod.Namespace, pod.Labels) || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	p.sandbox = true
	p.findings, p.once = e.checkPod(pod)
	self := "pod/" + pod.Namespace + "/" + podName(pod.Name, pod.GenerateName)
	for i := range p.findings {
		f := &p.findings[i]
		key, path := findingObject(f)
		src := others[key]
		if src == nil && key == self && p.at != nil && p.at.file != "" {
			src = p.at
		}
		if src != nil {
			f.File, f.Line = src.file, src.line(path)
		}
	}
}

// decodePods decodes a document read in pass 2 and returns its pods. A
// document taken for a Pod by its top-level lines must hold just that.
func decodePods(d *document, source, namespace string, cheap bool) ([]podAt, error) {
	if cheap {
		// A plain Pod document: straight into a Pod, as add would, without
		// reading the document once more for its kind.
		// Straight from the document's tree into the Pod (decodeNode);
		// the tree is also where Locate finds the lines.
		// An items key makes it a list to kubectl, kind: Pod or not.
		if lines, err := parseBlockYAML(d.data); err == nil && !hasKey(lines, "items") {
			var p corev1.Pod
			if err := decodePodTree(lines, &p); err == nil && p.Kind == "Pod" && p.APIVersion == "v1" {
				m := &Manifests{Namespace: namespace}
				p.Namespace = m.namespace(p.Namespace)
				defaultPodSpec(&p.Spec)
				return []podAt{{pod: &p, at: &origin{file: source, doc: d, lite: lines}}}, nil
			}
		}
	}
	var pods []podAt
	m := &Manifests{Namespace: namespace, Skipped: map[string]int{}, onPod: func(p *corev1.Pod, at *origin) { pods = append(pods, podAt{pod: p, at: at}) }}
	if err := m.addDocument(d, source); err != nil {
		return nil, err
	}
	if cheap && (len(pods) != 1 || len(m.NetworkPolicies)+len(m.Cilium)+len(m.Sandboxes)+len(m.Claims)+len(m.WarmPools)+len(m.Workloads)+len(m.AdminNetworkPolicies)+len(m.Namespaces)+len(m.Skipped) > 0) {
		return nil, errors.New("its top-level lines say kind: Pod, but it does not decode as one Pod (write it as plain block YAML)")
	}
	return pods, nil
}

// hasKey reports whether a mapping node has the key.
func hasKey(n *lnode, key string) bool {
	line, _ := n.entry(key)
	return line != 0
}

// eachDocument calls fn with every document of src and its number (from
// 1, as DecodeManifests numbers them) until fn returns false. The
// document's data is only valid during the call: fn copies what it keeps
// (most documents of a big file are only looked at). A read error
// is returned with the number of the document it stopped, worded as
// DecodeManifests words it.
func eachDocument(src scanSource, fn func(doc int, d *document) bool) (int, error) {
	rc, err := src.open()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	ds := newDocStream(rc)
	ds.borrow = true
	for doc := 1; ; doc++ {
		d, err := ds.next()
		if errors.Is(err, io.EOF) {
			return doc, nil
		}
		if err != nil {
			return doc, fmt.Errorf("%s: %w", src.name, err)
		}
		if !fn(doc, &d) {
			return doc, nil
		}
	}
}

// resolve turns one -f argument into the files it names.
func (s *FileScan) resolve(p string) ([]scanSource, []func(), error) {
	if p == "-" {
		src, clean, err := s.stdinCopy()
		if err != nil {
			return nil, nil, err
		}
		return []scanSource{src}, []func(){clean}, nil
	}
	files, notes, err := ManifestFiles(p, s.Recursive)
	if err != nil {
		return nil, nil, err
	}
	s.notes = append(s.notes, notes...)
	var out []scanSource
	for _, f := range files {
		out = append(out, scanSource{name: f, open: func() (io.ReadCloser, error) { return os.Open(f) }})
	}
	return out, nil, nil
}

// stdinCopy keeps standard input for the second pass: in an unlinked
// temporary file, or in memory where no file can be made.
func (s *FileScan) stdinCopy() (scanSource, func(), error) {
	in := s.Stdin
	if in == nil {
		in = os.Stdin
	}
	f, err := os.CreateTemp(s.TempDir, "sandprobe-stdin-*")
	if err != nil {
		data, err := io.ReadAll(in)
		if err != nil {
			return scanSource{}, nil, fmt.Errorf("read stdin: %w", err)
		}
		return scanSource{name: "stdin", open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}, func() {}, nil
	}
	os.Remove(f.Name())
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return scanSource{}, nil, fmt.Errorf("read stdin: %w", err)
	}
	open := func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(f, 0, 1<<62)), nil
	}
	return scanSource{name: "stdin", open: open}, func() { f.Close() }, nil
}

// looksLikePod reports whether a YAML document's top-level lines (those
// not indented) say it is a core v1 Pod: exactly one `kind: Pod` and one
// `apiVersion: v1`. Anything else — JSON, flow style, a List — is decoded
// in pass 1; a document taken for a Pod is still decoded whole in pass 2
// and refused if it is not one.
func looksLikePod(raw []byte) bool {
	if hasUnicodeBreak(raw) {
		return false // a line may hide after one: decoded whole in pass 1
	}
	kinds, versions := 0, 0
	pod, v1 := false, false
	// ended: the value of the last kind: or apiVersion: line is known to
	// end on its line (no deeper line continues the scalar: "kind: Pod\n 0"
	// is kind "Pod 0").
	ended := true
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if !ended {
				return false
			}
			continue
		}
		ended = true
		if c := line[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			// Not a plain key: an anchor, a tag, a quoted key, a flow
			// collection, a separator. Only a full decoding tells.
			return false
		}
		if v, ok := bytes.CutPrefix(line, []byte("kind:")); ok {
			if len(v) > 0 && v[0] != ' ' {
				return false // "kind:Pod" is no key
			}
			kinds++
			pod, ended = scalar(v) == "Pod", false
		} else if v, ok := bytes.CutPrefix(line, []byte("apiVersion:")); ok {
			if len(v) > 0 && v[0] != ' ' {
				return false
			}
			versions++
			v1, ended = scalar(v) == "v1", false
		} else if itemsKey(line) {
			return false // a list to kubectl, whatever its kind
		}
	}
	return kinds == 1 && versions == 1 && pod && v1
}

// itemsKey reports whether a top-level plain-key line is the items key.
func itemsKey(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("items"))
	return ok && len(bytes.TrimLeft(rest, " ")) > 0 && bytes.TrimLeft(rest, " ")[0] == ':'
}

// scalar is a top-level value without a trailing comment, spaces or quotes.
func scalar(v []byte) string {
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = v[:i]
	}
	v = bytes.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	return string(v)
}
