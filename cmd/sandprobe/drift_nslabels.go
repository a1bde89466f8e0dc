package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// namespaceLabelsFlag is drift's repeatable --namespace-labels
// NS=KEY=VALUE,KEY=VALUE: the labels of a namespace whose Namespace object
// is not among the -f files, which admin network policies and Cilium may
// select on. "NS=" says the namespace carries no labels but its name.
type namespaceLabelsFlag map[string]map[string]string

func (f *namespaceLabelsFlag) String() string {
	if f == nil || len(*f) == 0 {
		return ""
	}
	var parts []string
	for _, ns := range slices.Sorted(maps.Keys(*f)) {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys((*f)[ns])) {
			kv = append(kv, k+"="+(*f)[ns][k])
		}
		parts = append(parts, ns+"="+strings.Join(kv, ","))
	}
	return strings.Join(parts, " ")
}

func (f *namespaceLabelsFlag) Type() string { return "NS=KEY=VALUE,…" }

func (f *namespaceLabelsFlag) Set(v string) error {
	ns, list, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want NAMESPACE=KEY=VALUE,… (NAMESPACE= for no labels)", v)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", ns, errs[0])
	}
	if *f == nil {
		*f = namespaceLabelsFlag{}
	}
	if _, twice := (*f)[ns]; twice {
		return fmt.Errorf("namespace %s given twice (list all its labels in one --namespace-labels %s=K=V,K=V)", ns, ns)
	}
	labels := map[string]string{}
	if list != "" {
		for _, pair := range strings.Split(list, ",") {
			k, val, ok := strings.Cut(pair, "=")
			if !ok {
				return fmt.Errorf("namespace %s: label %q: want KEY=VALUE", ns, pair)
			}
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return fmt.Errorf("namespace %s: label key %q: %s", ns, k, errs[0])
			}
			if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
				return fmt.Errorf("namespace %s: label %s value %q: %s", ns, k, val, errs[0])
			}
			if _, twice := labels[k]; twice {
				return fmt.Errorf("namespace %s: label %s given twice", ns, k)
			}
			labels[k] = val
		}
	}
	(*f)[ns] = labels
	return nil
}
