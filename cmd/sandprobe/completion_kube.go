package main

import (
	"context"
	"slices"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/internal/kubeclient"
	"github.com/sandprobe/sandprobe/policy"
)

// kubeContexts completes --context with the contexts of the kubeconfig
// the command would load (--kubeconfig, else $KUBECONFIG, else ~/.kube/config).
func kubeContexts(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var path string
	if f := cmd.Flags().Lookup("kubeconfig"); f != nil {
		path = f.Value.String()
	}
	names, err := kubeclient.Contexts(path)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
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
	if cfg, err := kubeclient.Config(value("kubeconfig"), value("context")); err == nil {
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
