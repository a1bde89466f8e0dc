// Command e2etool is the small document work of hack/e2e.sh, in Go rather
// than inline scripts:
//
//	sandprobe render … | go run ./hack/e2e/e2etool sandbox [--name N] [--unlabel KEY] [--only-pod]
//	  the rendered objects with the probe pod turned into a live sandbox: it
//	  runs the cluster's /probe pause (waits for SIGTERM) from
//	  sandprobe.local/probe:1, as an agent would, and has no deadline; --name
//	  renames it, --unlabel drops a label, --only-pod prints the pod alone.
//
//	go run ./hack/e2e/e2etool cilium-view --policy P --objects OBJS.json --endpoints EPS.json
//	  drift's reading of the egress policies against the Cilium agent's view
//	  of each pod's endpoint (ciliumview.go); exit 1 on a difference.
//
//	go run ./hack/e2e/e2etool junit-failures FILE
//	  "suite / testcase: message" for each failure of a JUnit report.
//
// Exit 2 on bad usage, 1 when the input is not what the e2e expects.
package main

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// sandboxImage and sandboxCommand: the cluster's own image
// (hack/cluster/up.sh imports it) and its wait-for-SIGTERM command.
const sandboxImage = "sandprobe.local/probe:1"

var sandboxCommand = []any{"/probe"}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "sandbox":
		err = sandbox(os.Args[2:], os.Stdin, os.Stdout)
	case "cilium-view":
		code, err := ciliumView(os.Args[2:], os.Stdout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2etool cilium-view: %v\n", err)
		}
		os.Exit(code)
	case "junit-failures":
		if len(os.Args) != 3 {
			usage()
		}
		err = junitFailures(os.Args[2], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2etool %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: e2etool sandbox [--name N] [--unlabel KEY] [--only-pod] < rendered.yaml | e2etool cilium-view --policy P --objects F --endpoints F | e2etool junit-failures FILE")
	os.Exit(2)
}

// sandbox rewrites the one Pod among the documents on r.
func sandbox(args []string, r io.Reader, w io.Writer) error {
	fs := flag.NewFlagSet("sandbox", flag.ExitOnError)
	name := fs.String("name", "", "the pod's new name")
	unlabel := fs.String("unlabel", "", "a label to remove from the pod")
	onlyPod := fs.Bool("only-pod", false, "print the pod alone")
	_ = fs.Parse(args)
	docs, err := splitDocs(r)
	if err != nil {
		return err
	}
	pods := 0
	var out []string
	for _, d := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			return fmt.Errorf("a rendered document: %w", err)
		}
		if obj["kind"] != "Pod" {
			if !*onlyPod {
				out = append(out, d)
			}
			continue
		}
		pods++
		if err := livePod(obj, *name, *unlabel); err != nil {
			return err
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		out = append(out, string(b))
	}
	if pods != 1 {
		return fmt.Errorf("want one Pod among the rendered objects, found %d", pods)
	}
	for _, d := range out {
		fmt.Fprintf(w, "---\n%s", strings.TrimPrefix(d, "---\n"))
	}
	return nil
}

// livePod turns the rendered probe pod into a sandbox that stays Running.
func livePod(pod map[string]any, name, unlabel string) error {
	meta, _ := pod["metadata"].(map[string]any)
	spec, _ := pod["spec"].(map[string]any)
	if meta == nil || spec == nil {
		return errors.New("the rendered pod has no metadata or spec")
	}
	if name != "" {
		meta["name"] = name
	}
	if labels, _ := meta["labels"].(map[string]any); unlabel != "" {
		if _, ok := labels[unlabel]; !ok {
			return fmt.Errorf("the rendered pod has no label %q", unlabel)
		}
		delete(labels, unlabel)
	}
	// A probe pod ends at the probe deadline; an agent runs until it is
	// done (the live sandbox must outlive every run of the e2e).
	if _, ok := spec["activeDeadlineSeconds"]; !ok {
		return errors.New("the rendered pod has no activeDeadlineSeconds: its shape changed")
	}
	delete(spec, "activeDeadlineSeconds")
	containers, _ := spec["containers"].([]any)
	if len(containers) != 1 {
		return fmt.Errorf("the rendered pod has %d containers, want 1: its shape changed", len(containers))
	}
	c, _ := containers[0].(map[string]any)
	cmd, _ := c["command"].([]any)
	if len(cmd) != 1 || !strings.HasPrefix(fmt.Sprint(cmd[0]), "/sandprobe") {
		return fmt.Errorf("the rendered pod runs %v, want /sandprobe…: its shape changed", cmd)
	}
	c["image"] = sandboxImage
	c["command"] = sandboxCommand
	c["args"] = []any{"pause"}
	return nil
}

// splitDocs splits a YAML stream on its "---" lines, dropping empty documents.
func splitDocs(r io.Reader) ([]string, error) {
	var docs []string
	var cur bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			docs = append(docs, cur.String())
		}
		cur.Reset()
	}
	for sc.Scan() {
		if sc.Text() == "---" {
			flush()
			continue
		}
		cur.WriteString(sc.Text())
		cur.WriteByte('\n')
	}
	flush()
	return docs, sc.Err()
}

type junitReport struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name     string `xml:"name,attr"`
			Failures []struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// junitFailures prints "suite / testcase: message" per failure of FILE.
func junitFailures(file string, w io.Writer) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var rep junitReport
	if err := xml.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			for _, f := range c.Failures {
				fmt.Fprintf(w, "%s / %s: %s\n", s.Name, c.Name, f.Message)
			}
		}
	}
	return nil
}
