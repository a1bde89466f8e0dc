package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/admission"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

func (a *app) cmdRender(fs *pflag.FlagSet) runFunc {
	var (
		policyPath, format, namespace, probeImage, nonce, name, image, probeBinary string
	)
	fs.StringVar(&policyPath, "policy", "", "the SandboxPolicy file (- for stdin)")
	fs.StringVar(&format, "format", "yaml", "yaml: policy ConfigMap, probe pod, NetworkPolicy and CiliumNetworkPolicy as multi-document YAML; egress: only the egress policies (the NetworkPolicy, or with --egress cilium the CiliumNetworkPolicy), what to apply in each sandbox namespace; admission: the policy ConfigMap and the ValidatingAdmissionPolicy of manifests/; rbac: the runner's Role and RoleBinding in each sandbox namespace; docker: the docker run command line; docker-json: its argv as a JSON array; proxy-allowlist: the forward proxy's host filter (anchored EREs, one per allowance)")
	fs.StringVarP(&namespace, "namespace", "n", "", "namespace of the rendered objects (default: the policy's namespaces)")
	fs.StringVar(&probeImage, "probe-image", "", "the sandprobe image (default spec.probe.image, then "+render.DefaultProbeImage+")")
	fs.StringVar(&nonce, "nonce", "", "the nonce the probe echoes")
	fs.StringVar(&name, "name", "", "name of the probe pod or container (default sandprobe-probe-POLICY)")
	group(fs, "--format docker flags", func() {
		fs.StringVar(&image, "image", "", "docker: the container image (default spec.image.ref, then the probe image)")
		fs.StringVar(&probeBinary, "probe-binary", "", "docker: host path of the static probe binary to bind in when the image lacks it (default /usr/local/bin/sandprobe-probe)")
	})
	var egress, mode string
	var requireLabels bool
	group(fs, "--format yaml and egress flags", func() {
		fs.StringVar(&egress, "egress", "networkpolicy,cilium", "yaml, egress: which egress policies to write: networkpolicy, cilium or both (comma-separated; egress: networkpolicy unless given)")
	})
	group(fs, "--format admission flags", func() {
		fs.StringVar(&mode, "mode", admission.ModeDeny, "admission: the rollout stage, the bindings' validationActions: deny (refuse the pod or template), warn (admit it, warn the client), audit (admit it, annotate the audit event), or warn,audit; see sandprobe drift --would-refuse before deny")
		fs.BoolVar(&requireLabels, "require-labels", false, "admission: also refuse (in the --mode stage) a pod in a sandbox namespace (spec.namespaces) without the sandbox labels")
	})
	return func(context.Context, []string) int {
		// Before the policy is read: a typo in the stage must not go unnoticed
		// behind a policy error, nor be ignored by a format that has no stage.
		actions, err := admission.ParseMode(mode)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe render: --mode: %v\n", err)
			return report.ExitBadInput
		}
		if format != "admission" && fs.Changed("mode") {
			fmt.Fprintf(a.stderr, "sandprobe render: --mode applies to --format admission only, not %q\n", format)
			return report.ExitBadInput
		}
		p, raw, ok := a.loadPolicy(policyPath)
		if !ok {
			return report.ExitBadInput
		}
		switch format {
		case "yaml", "egress":
			if format == "egress" && !fs.Changed("egress") {
				egress = string(render.KindNetworkPolicy)
			}
			return a.renderYAML(p, raw, policyPath, format, egress, namespace, render.ProbePodOptions{Name: name, ProbeImage: probeImage, Nonce: nonce})
		case "admission":
			return a.renderAdmission(p, raw, namespace, actions, requireLabels)
		case "rbac":
			return a.renderRBAC(p, namespace)
		case "docker", "docker-json":
			cmd := render.Docker(p, render.DockerOptions{Name: name, Image: image, ProbeImage: probeImage, ProbeBinary: probeBinary, Nonce: nonce})
			for _, n := range render.DockerNotes(p) {
				fmt.Fprintf(a.stderr, "%s: note: %s\n", policyPath, n)
			}
			if format == "docker" {
				fmt.Fprintln(a.stdout, cmd.String())
				break
			}
			enc := json.NewEncoder(a.stdout)
			if err := enc.Encode(cmd.Argv()); err != nil {
				return report.ExitCouldNotRun
			}
		case "proxy-allowlist":
			if err := render.WriteProxyAllowList(a.stdout, p); err != nil {
				return report.ExitCouldNotRun
			}
		default:
			fmt.Fprintf(a.stderr, "sandprobe render: --format: want yaml, egress, admission, rbac, docker, docker-json or proxy-allowlist, got %q\n", format)
			return report.ExitBadInput
		}
		return report.ExitOK
	}
}

// renderYAML writes --format yaml (the policy ConfigMap, the probe pod
// and the egress policies) or --format egress (the egress policies
// alone). Every problem that stops it is its own line, as validate's are.
func (a *app) renderYAML(p *policy.Policy, raw []byte, policyPath, format, egress, namespace string, opts render.ProbePodOptions) int {
	kinds, err := egressKinds(egress)
	if err != nil {
		fmt.Fprintf(a.stderr, "sandprobe render: --egress: %v\n", err)
		return report.ExitBadInput
	}
	var problems []error
	if format == "yaml" {
		// The probe pod's image; the egress policies have none.
		if err := render.CheckPinned(p, opts); err != nil {
			problems = append(problems, err)
		}
	}
	// An egress policy that cuts the sandbox off from what its own policy
	// requires would page someone for a "regression" render made.
	if err := render.CheckEgress(p, kinds...); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		policy.WriteProblems(a.stderr, policyPath, errors.Join(problems...))
		return report.ExitBadInput
	}
	objs := render.Manifests(p, raw, opts, namespace, kinds...)
	if format == "egress" {
		objs = render.EgressPolicies(p, namespace, kinds...)
	}
	if err := render.WriteYAML(a.stdout, objs...); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe render: %v\n", err)
		return report.ExitCouldNotRun
	}
	return report.ExitOK
}

// egressKinds parses --egress: a comma-separated subset of networkpolicy
// and cilium, at least one.
func egressKinds(v string) ([]render.EgressKind, error) {
	var kinds []render.EgressKind
	for _, k := range strings.Split(v, ",") {
		switch kind := render.EgressKind(strings.TrimSpace(k)); kind {
		case render.KindNetworkPolicy, render.KindCilium:
			if !slices.Contains(kinds, kind) {
				kinds = append(kinds, kind)
			}
		default:
			return nil, fmt.Errorf("want networkpolicy, cilium or both, got %q", k)
		}
	}
	return kinds, nil
}
