// Package kubeclient is sandprobe's one way to a Kubernetes API server: it
// loads the kubeconfig (or, inside a pod, the pod's service account) and
// speaks to the server through client-go's REST clients with a scheme that
// knows only the groups sandprobe reads and writes (core, networking, apps,
// batch) plus client-go's dynamic client for CRD-backed objects. Pods,
// nodes and the lists travel as protobuf, the cheapest encoding for the
// server and for us.
//
// It is not client-go's typed clientset: that links every API group's
// scheme and, measured, grows the runner from 31 MB to 54 MB and its
// resident memory at start from 22 MB to 41 MB for nothing sandprobe needs
// (docs/architecture.md, "The binary budget"). The runner (runner/kube),
// drift's live reader (drift) and the command line all build their
// clients here.
package kubeclient

import (
	"fmt"
	"os"
	"slices"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// serviceAccountNamespace is the namespace file of a pod's service account.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// inCluster says whether the loaders use the pod's service account: inside
// a pod, and asked for no kubeconfig, no context, and none in $KUBECONFIG.
func inCluster(path, kubeContext string) bool {
	return path == "" && kubeContext == "" && os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// loader is the kubeconfig at path (or $KUBECONFIG, or ~/.kube/config)
// with an optional context, as kubectl loads it.
func loader(path, kubeContext string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
}

// Config loads the kubeconfig at path (or $KUBECONFIG, or ~/.kube/config)
// with an optional context; with none of them present and inside a pod it
// uses the pod's service account, as the CronJob does.
func Config(path, kubeContext string) (*rest.Config, error) {
	if inCluster(path, kubeContext) {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := loader(path, kubeContext).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}

// Namespace is the namespace of the caller: its pod's (the service
// account's namespace file) inside a cluster, else the kubeconfig
// context's, else "default", as kubectl would pick.
func Namespace(path, kubeContext string) string {
	if inCluster(path, kubeContext) {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil && len(b) > 0 {
			return string(b)
		}
	}
	ns, _, err := loader(path, kubeContext).Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// Contexts are the context names of the kubeconfig at path (or
// $KUBECONFIG, or ~/.kube/config), sorted.
func Contexts(path string) ([]string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	var names []string
	for n := range cfg.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}
