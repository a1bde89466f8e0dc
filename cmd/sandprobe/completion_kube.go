package main

import (
	"context"
	"slices"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner/kube"
)

// kubeContexts completes --context with the contexts of the kubeconfig
// the command would load (--kubeconfig, else $KUBECONFIG, else ~/.kube/config).
func kubeContexts(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f := cmd.Flags().Lookup("kubeconfig"); f != nil && f.Value.String() != "" {
		rules.ExplicitPath = f.Value.String()
	}
	cfg, err := rules.Load()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for n := range cfg.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

// namespaceCompletionTimeout bounds asking the cluster while a shell waits.
const namespaceCompletionTimeout = 3 * time.Second

// kubeNamespaces completes --namespace as kubectl does, from the cluster
// of --kubeconfig and --context (when it answers in time), after the
// namespaces the --policy file declares, which need no cluster.
func kubeNamespaces(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	value := func(name string) string {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	var names []string
	if path := value("policy"); path != "" && path != "-" {
		if p, _, err := policy.LoadFile(path); err == nil {
			names = append(names, p.Spec.Namespaces...)
		}
	}
	if cfg, err := kube.RESTConfig(value("kubeconfig"), value("context")); err == nil {
		cfg.Timeout = namespaceCompletionTimeout
		if api, err := drift.NewKubeAPI(cfg); err == nil {
			ctx, cancel := context.WithTimeout(cmd.Context(), namespaceCompletionTimeout)
			defer cancel()
			if list, err := api.ListNamespaces(ctx, metav1.ListOptions{}); err == nil {
				for _, ns := range list.Items {
					if !slices.Contains(names, ns.Name) {
						names = append(names, ns.Name)
					}
				}
			}
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
