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

	"github.com/sandprobe/sandprobe/internal/manifest"
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
	r := &scanRun{s: s, col: col, podDocs: map[docPos]bool{}, errPos: docPos{src: int(^uint(0) >> 1)}}
	r.m = &Manifests{Namespace: s.Namespace, NamespaceLabels: s.NamespaceLabels}
	r.m.Skipped = map[string]int{}
	defer func() {
		for _, c := range r.cleanup {
			c()
		}
	}()
	r.pass1()
	m := r.m

	// Between the passes: the policies and templates, unless the files are
	// already known to be bad (a decode error comes first, as it would
	// reading once).
	var setupErr error
	if r.firstErr == nil {
		r.ts, setupErr = m.prepare(s.Engine, col, s.Pods > 0)
	}
	r.judge = r.firstErr == nil && setupErr == nil
	if m.origins == nil {
		m.origins = origins{}
	}
	// Findings are located as they are added (the spool cannot be
	// changed afterwards), as CheckManifests locates them at its end.
	col.locate = m.Locate
	defer func() { col.locate = nil }()

	if err := r.pass2(); err != nil {
		return err
	}
	switch {
	case r.podErr != nil:
		return r.podErr
	case r.firstErr != nil:
		return r.firstErr
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
	m.finish(r.ts, col)
	return nil
}

// scanRun is one FileScan.Run: the two passes' state.
type scanRun struct {
	s       *FileScan
	col     *Collector
	m       *Manifests
	sources []scanSource
	cleanup []func()
	// podDocs are the documents pass 1 found pods in (Lists, JSON pods):
	// pass 2 decodes them again.
	podDocs map[docPos]bool
	// firstErr is pass 1's first bad document, at errPos.
	firstErr error
	errPos   docPos
	ts       *Templates
	judge    bool // the files are good: pass 2 judges the pods it decodes

	// Pass 2: the workers, the batch being filled and its file, the first
	// bad pod (which stops everything).
	st       *stream.Stream
	batch    []scanJob
	buf      []byte
	batchSrc string
	podErr   error
	stop     atomic.Bool
}

// scanJob is one document for pass 2's workers; cheap when it is a plain
// Pod pass 1 only counted.
type scanJob struct {
	doc   int
	d     *manifest.Document
	cheap bool
}

func (r *scanRun) fail(pos docPos, err error) {
	r.firstErr, r.errPos = err, pos
}

// pass1 keeps every document but a plain Pod (policies, namespaces,
// templates), counts the pods, and stops at the first bad document.
func (r *scanRun) pass1() {
	s, m := r.s, r.m
	defer func() { m.onPod, m.podsLater, m.lazyLines = nil, false, false }()
	for _, p := range s.Paths {
		srcs, clean, err := s.resolve(p)
		r.cleanup = append(r.cleanup, clean...)
		if err != nil {
			r.fail(docPos{src: len(r.sources)}, err)
			return
		}
		for _, src := range srcs {
			si := len(r.sources)
			r.sources = append(r.sources, src)
			doc, err := eachDocument(src, func(doc int, d *manifest.Document) bool {
				return r.keep(si, src, doc, d)
			})
			if err != nil && r.firstErr == nil {
				r.fail(docPos{si, doc}, err)
			}
			if r.firstErr != nil {
				return
			}
		}
	}
}

// keep is pass 1 on one document: a plain Pod is only counted; anything
// else is decoded and kept, and remembered for pass 2 if it held pods.
func (r *scanRun) keep(si int, src scanSource, doc int, d *manifest.Document) bool {
	s, m := r.s, r.m
	if !d.JSON && looksLikePod(d.Data) {
		s.Pods++
		return true
	}
	d = &manifest.Document{Data: bytes.Clone(d.Data), Line: d.Line, JSON: d.JSON} // kept: origins point at it
	found := false
	m.onPod = func(*corev1.Pod, *origin) { found = true; s.Pods++ }
	m.podsLater = true // counted here, decoded in pass 2
	m.lazyLines = true // kept through pass 2: lines parsed again when asked for
	if err := m.addDocument(d, src.name); err != nil {
		r.fail(docPos{si, doc}, fmt.Errorf("%s: document %d: %w", src.name, doc, err))
		return false
	}
	if found {
		r.podDocs[docPos{si, doc}] = true
	}
	return true
}

// Documents go to pass 2's workers in batches (a pod is tens of
// microseconds of work: one task each was a tenth of it in hand-offs),
// copied into one buffer per batch; results are added in file order.
const batchDocs, batchBytes = 16, 64 << 10

// pass2 decodes the pods, up to the first bad document of pass 1 (an
// earlier bad pod is the error to report), in parallel, and adds their
// findings in file order. Its error is a file that changed between the
// passes.
func (r *scanRun) pass2() error {
	workers := r.s.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	r.st = stream.New().WithMaxGoroutines(workers)
	for si, src := range r.sources {
		if r.stop.Load() || si > r.errPos.src {
			break
		}
		_, err := eachDocument(src, func(doc int, d *manifest.Document) bool {
			return r.queue(si, src, doc, d)
		})
		if len(r.batch) > 0 {
			r.flush() // a batch holds one file's documents
		}
		if err != nil && r.firstErr == nil {
			// The file changed under us (or vanished) between the passes.
			r.st.Wait()
			return err
		}
	}
	r.st.Wait()
	return nil
}

// queue adds a pod document to the batch, flushing it when full.
func (r *scanRun) queue(si int, src scanSource, doc int, d *manifest.Document) bool {
	pos := docPos{si, doc}
	if r.stop.Load() || !pos.before(r.errPos) {
		return false
	}
	cheap := !d.JSON && looksLikePod(d.Data)
	if !cheap && !r.podDocs[pos] {
		return true
	}
	if r.buf == nil {
		r.buf = make([]byte, 0, max(batchBytes, len(d.Data)))
	} else if len(r.buf)+len(d.Data) > cap(r.buf) {
		r.flush()
		r.buf = make([]byte, 0, max(batchBytes, len(d.Data)))
	}
	// The worker's copy: its own slice of the batch's buffer.
	at := len(r.buf)
	r.buf = append(r.buf, d.Data...)
	r.batchSrc = src.name
	r.batch = append(r.batch, scanJob{doc, &manifest.Document{Data: r.buf[at:len(r.buf):len(r.buf)], Line: d.Line, JSON: d.JSON}, cheap})
	if len(r.batch) == batchDocs {
		r.flush()
	}
	return true
}

// flush hands the batch to a worker: it decodes (and, the files being
// good, judges) its pods; the callback adds their findings in file order.
func (r *scanRun) flush() {
	jobs, source := r.batch, r.batchSrc
	r.batch, r.buf = nil, nil
	s := r.s
	r.st.Go(func() stream.Callback {
		type done struct {
			pods []podAt
			err  error
		}
		out := make([]done, 0, len(jobs))
		for _, j := range jobs {
			pods, err := decodePods(j.d, source, s.Namespace, j.cheap)
			if err == nil && r.judge {
				// The rules and Locate only read the engine and the
				// origins of pass 1: they run here, in parallel.
				for i := range pods {
					pods[i].judge(s.Engine, r.m.origins)
				}
			}
			out = append(out, done{pods, err})
			if err != nil {
				break
			}
		}
		return func() {
			for k, d := range out {
				if r.stop.Load() {
					return
				}
				if d.err != nil {
					r.podErr = fmt.Errorf("%s: document %d: %w", source, jobs[k].doc, d.err)
					r.stop.Store(true)
					return
				}
				if r.judge {
					// In file order: what is reported once per run,
					// and what a template explains.
					for _, p := range d.pods {
						if p.sandbox {
							r.col.addLocated(r.ts.Pod(p.pod, s.Engine.settle(p.findings, p.once)))
						}
					}
				}
			}
		}
	})
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
func decodePods(d *manifest.Document, source, namespace string, cheap bool) ([]podAt, error) {
	if cheap && fastYAML {
		// A plain Pod document: straight into a Pod, as add would, without
		// reading the document once more for its kind.
		// Straight from the document's tree into the Pod (manifest.Decode);
		// the tree is also where Locate finds the lines.
		// An items key makes it a list to kubectl, kind: Pod or not.
		if lines, err := manifest.Parse(d.Data); err == nil && !lines.Has("items") {
			var p corev1.Pod
			if err := manifest.Decode(lines, &p); err == nil && p.Kind == "Pod" && p.APIVersion == "v1" {
				m := &Manifests{Namespace: namespace}
				p.Namespace = m.namespace(p.Namespace)
				defaultPodSpec(&p.Spec)
				return []podAt{{pod: &p, at: &origin{file: source, doc: d, lite: &liteTree{node: lines}}}}, nil
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

// eachDocument calls fn with every document of src and its number (from
// 1, as DecodeManifests numbers them) until fn returns false. The
// document's data is only valid during the call: fn copies what it keeps
// (most documents of a big file are only looked at). A read error
// is returned with the number of the document it stopped, worded as
// DecodeManifests words it.
func eachDocument(src scanSource, fn func(doc int, d *manifest.Document) bool) (int, error) {
	rc, err := src.open()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	ds := manifest.NewStream(rc)
	ds.Borrow = true
	for doc := 1; ; doc++ {
		d, err := ds.Next()
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
	if manifest.HasUnicodeBreak(raw) {
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
