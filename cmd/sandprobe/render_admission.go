package main

import (
	"fmt"
	"io"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/sandprobe/sandprobe/admission"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// The policy-dependent objects of the kustomize base (manifests/): fixed
// names, so an overlay replaces the base's objects with its own policy's by
// patching, and one cluster has one of each.
const (
	systemNamespace     = "sandprobe-system"
	policyConfigMapName = "sandprobe-policy"
)

// renderAdmission prints what manifests/ holds that depends on the policy:
// the policy ConfigMap the CronJob and its probe pods mount, and the
// ValidatingAdmissionPolicy (with its binding, in the rollout stage
// actions names) that holds sandbox pods to the policy's runtime classes.
func (a *app) renderAdmission(p *policy.Policy, raw []byte, namespace string, actions []admissionv1.ValidationAction, requireLabels bool) int {
	if err := writeAdmission(a.stdout, p, raw, namespace, actions, requireLabels); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe render: %v\n", err)
		return report.ExitBadInput
	}
	return report.ExitOK
}

// The pods' policy, the templates' policy (each with its binding) and,
// with requireLabels, the policy that refuses unlabelled pods in the
// sandbox namespaces.
func writeAdmission(w io.Writer, p *policy.Policy, raw []byte, namespace string, actions []admissionv1.ValidationAction, requireLabels bool) error {
	if namespace == "" {
		namespace = systemNamespace
	}
	if err := admission.Check(p); err != nil {
		return err
	}
	if requireLabels {
		if err := admission.CheckLabels(p); err != nil {
			return err
		}
	}
	cm := render.PolicyConfigMap(p, raw, render.ProbePodOptions{Namespace: namespace, PolicyConfigMap: policyConfigMapName})
	vap, binding := admission.Render(p, actions)
	tvap, tbinding := admission.RenderTemplates(p, actions)
	objs := []any{cm, vap, binding, tvap, tbinding}
	if requireLabels {
		lvap, lbinding := admission.RenderLabels(p, actions)
		objs = append(objs, lvap, lbinding)
	}
	return render.WriteYAML(w, objs...)
}
