package drift_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/report"
)

// TestFileScanSameNameOwnLine: two documents write a pod of one name (a
// List kept by pass 1, then a plain Pod, as a repository that copies a
// manifest does). Each pod's findings point at its own document, never at
// the other's lines.
func TestFileScanSameNameOwnLine(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	const pod = `apiVersion: v1
kind: Pod
metadata:
  name: twin
  namespace: sandboxes
  labels: {sandbox: "true"}
spec:
  runtimeClassName: gvisor
  containers:
  - name: agent
    image: agent:1
    securityContext:
      privileged: true
`
	list := "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: twin\n    namespace: sandboxes\n    labels: {sandbox: \"true\"}\n  spec:\n    runtimeClassName: gvisor\n    containers:\n    - name: agent\n      image: agent:1\n      securityContext:\n        privileged: true\n"
	file := filepath.Join(t.TempDir(), "pods.yaml")
	data := list + "---\n" + pod
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	// Lines of "privileged: true": line 16 in the List, 13 of the Pod
	// after the List's 16 lines and the separator.
	want := []int{16, 16 + 1 + 13}
	_, sp, err := streamed(t, p, []string{file}, nil, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	err = sp.Each(func(f *report.Finding) error {
		if f.Check == drift.PodPrivileged && f.Status == report.Fail {
			got = append(got, f.Line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("%s lines %v, want %v (each pod's own document)", drift.PodPrivileged, got, want)
	}
}
