package manifests

import (
	"context"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The identity the CronJob's pod runs as.
const (
	serviceAccountUser = "system:serviceaccount:sandprobe-system:sandprobe"
	ownNamespace       = "sandprobe-system"
	allNamespaces      = ""
	// sandboxNamespace is the reference policy's spec.namespaces.
	sandboxNamespace = "sandboxes"
)

var serviceAccountGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ownNamespace, "system:authenticated"}

type access struct {
	verb, group, resource, subresource, namespace, name string
	why                                                 string // for an allowed row: who needs it; for a denied one: what it would open
}

func (a access) String() string {
	res := a.resource
	if a.group != "" {
		res += "." + a.group
	}
	if a.subresource != "" {
		res += "/" + a.subresource
	}
	ns := a.namespace
	if ns == "" {
		ns = "*"
	}
	if a.name != "" {
		res += "/" + a.name
	}
	return fmt.Sprintf("%s %s in %s", a.verb, res, ns)
}

// TestRBACServiceAccountCan proves on the real API server (RBAC authorizer)
// that the ServiceAccount may do everything the kube runner and drift need.
func TestRBACServiceAccountCan(t *testing.T) {
	allowed := []access{
		{verb: "create", resource: "pods", namespace: ownNamespace, why: "runner: launch the probe pod"},
		{verb: "get", resource: "pods", namespace: ownNamespace, why: "runner: read the probe pod's state"},
		{verb: "watch", resource: "pods", namespace: ownNamespace, why: "runner: wait for Succeeded/Failed"},
		{verb: "list", resource: "pods", namespace: ownNamespace, why: "runner: sweep leftover probe pods by label"},
		{verb: "delete", resource: "pods", namespace: ownNamespace, why: "runner: remove the probe pod and leftovers"},
		{verb: "get", resource: "pods", subresource: "log", namespace: ownNamespace, why: "runner: read the probe's verdict"},
		{verb: "list", resource: "events", namespace: ownNamespace, why: "runner: why a probe pod never started"},
		{verb: "create", resource: "pods", namespace: sandboxNamespace, why: "runner: the probe pod stands where the sandboxes stand (narrowed to probe pods by sandprobe-runner-scope)"},
		{verb: "delete", resource: "pods", namespace: sandboxNamespace, why: "runner: remove its probe pod (narrowed to the pods it created by sandprobe-runner-scope)"},
		{verb: "watch", resource: "pods", namespace: sandboxNamespace, why: "runner: wait for its probe pod to end (cluster-wide, for drift too)"},
		{verb: "list", resource: "pods", namespace: sandboxNamespace, why: "runner: sweep leftover probe pods by label"},
		{verb: "list", resource: "events", namespace: sandboxNamespace, why: "runner: why a probe pod never started"},
		{verb: "list", resource: "pods", namespace: allNamespaces, why: "drift: every sandbox pod, page by page"},
		{verb: "watch", resource: "pods", namespace: allNamespaces, why: "drift"},
		{verb: "list", resource: "pods", namespace: "sandboxes", why: "drift: the policy's namespaces"},
		{verb: "list", group: "networking.k8s.io", resource: "networkpolicies", namespace: allNamespaces, why: "drift: egress policies"},
		{verb: "watch", group: "networking.k8s.io", resource: "networkpolicies", namespace: allNamespaces, why: "drift"},
		{verb: "list", group: "cilium.io", resource: "ciliumnetworkpolicies", namespace: allNamespaces, why: "drift: Cilium policies"},
		{verb: "list", group: "cilium.io", resource: "ciliumclusterwidenetworkpolicies", why: "drift: Cilium cluster-wide policies"},
		{verb: "watch", group: "cilium.io", resource: "ciliumclusterwidenetworkpolicies", why: "drift"},
		{verb: "list", group: "agents.x-k8s.io", resource: "sandboxes", namespace: allNamespaces, why: "drift: Agent Sandbox objects"},
		{verb: "watch", group: "agents.x-k8s.io", resource: "sandboxes", namespace: allNamespaces, why: "drift"},
		{verb: "list", group: "extensions.agents.x-k8s.io", resource: "sandboxtemplates", namespace: allNamespaces, why: "drift: SandboxTemplates"},
		{verb: "list", group: "apps", resource: "deployments", namespace: allNamespaces, why: "drift: workloads through their pod templates"},
		{verb: "list", group: "apps", resource: "replicasets", namespace: allNamespaces, why: "drift: workloads"},
		{verb: "list", group: "apps", resource: "statefulsets", namespace: allNamespaces, why: "drift: workloads"},
		{verb: "list", group: "apps", resource: "daemonsets", namespace: allNamespaces, why: "drift: workloads"},
		{verb: "list", group: "batch", resource: "jobs", namespace: allNamespaces, why: "drift: workloads"},
		{verb: "list", group: "batch", resource: "cronjobs", namespace: allNamespaces, why: "drift: workloads"},
		{verb: "list", resource: "namespaces", why: "drift: declared namespaces exist; namespace labels for selectors"},
		{verb: "list", group: "policy.networking.k8s.io", resource: "adminnetworkpolicies", why: "drift: admin network policies"},
		{verb: "list", group: "policy.networking.k8s.io", resource: "baselineadminnetworkpolicies", why: "drift: the baseline admin network policy"},
		{verb: "list", group: "policy.networking.k8s.io", resource: "clusternetworkpolicies", why: "drift: cluster network policies"},
		{verb: "list", resource: "nodes", why: "runner --per-node: the nodes that host sandboxes"},
		{verb: "create", group: "authentication.k8s.io", resource: "selfsubjectreviews", why: "runner: its own user name, for sandprobe.dev/created-by (every authenticated user may)"},
		{verb: "get", resource: "nodes", name: "worker-1", why: "runner: status.nodeInfo.kernelVersion for the runtime check"},
		// serve --watch: one list and one watch per watched kind
		// (docs/fleet.md, "Minutes, not half hours").
		{verb: "watch", group: "cilium.io", resource: "ciliumnetworkpolicies", namespace: allNamespaces, why: "serve --watch: Cilium policy changes"},
		{verb: "watch", group: "policy.networking.k8s.io", resource: "adminnetworkpolicies", why: "serve --watch: admin network policy changes"},
		{verb: "watch", group: "policy.networking.k8s.io", resource: "baselineadminnetworkpolicies", why: "serve --watch: baseline admin network policy changes"},
		{verb: "watch", group: "policy.networking.k8s.io", resource: "clusternetworkpolicies", why: "serve --watch: cluster network policy changes"},
		{verb: "list", group: "apps", resource: "daemonsets", namespace: "kube-system", why: "serve --watch: the CNI agents' DaemonSets and their selectors"},
		{verb: "watch", resource: "pods", namespace: "kube-system", why: "serve --watch: the CNI agents' pods, node by node"},
		{verb: "list", resource: "pods", namespace: "calico-system", why: "serve --watch: the CNI agents' pods, node by node"},
		{verb: "watch", resource: "namespaces", why: "serve --watch: a sandbox namespace relabelled (admin and Cilium policies select by namespace labels)"},
	}
	client := appliedBase(t)
	for _, a := range allowed {
		t.Run(a.String(), func(t *testing.T) {
			if ok, reason := can(t, client, a); !ok {
				t.Errorf("%s: denied (%s), but %s", a, reason, a.why)
			}
		})
	}
}

// TestRBACServiceAccountCannot proves the ServiceAccount can do nothing
// beyond that: no Secrets anywhere, no pods outside its namespace, no way
// into a running pod, no writes to nodes, policies or its own permissions.
func TestRBACServiceAccountCannot(t *testing.T) {
	denied := []access{
		{verb: "get", resource: "secrets", namespace: ownNamespace, why: "secrets next to it"},
		{verb: "list", resource: "secrets", namespace: ownNamespace, why: "secrets next to it"},
		{verb: "watch", resource: "secrets", namespace: ownNamespace, why: "secrets next to it"},
		{verb: "get", resource: "secrets", namespace: "kube-system", why: "the cluster's secrets"},
		{verb: "list", resource: "secrets", namespace: allNamespaces, why: "every secret"},
		{verb: "watch", resource: "secrets", namespace: allNamespaces, why: "every secret"},
		{verb: "get", resource: "secrets", namespace: "sandboxes", name: "broker", why: "a sandbox's credentials"},
		{verb: "create", resource: "pods", namespace: "default", why: "pods outside its namespace"},
		{verb: "create", resource: "pods", namespace: "kube-system", why: "pods with kube-system's service accounts"},
		{verb: "create", resource: "pods", namespace: "other-team", why: "pods in a namespace outside spec.namespaces"},
		{verb: "create", resource: "pods", namespace: allNamespaces, why: "pods anywhere"},
		{verb: "delete", resource: "pods", namespace: "other-team", why: "killing pods outside the sandbox namespaces"},
		{verb: "delete", resource: "pods", namespace: allNamespaces, why: "killing any pod"},
		{verb: "deletecollection", resource: "pods", namespace: sandboxNamespace, why: "killing every sandbox at once"},
		{verb: "update", resource: "pods", namespace: sandboxNamespace, why: "relabelling a sandbox out of its policies"},
		{verb: "patch", resource: "pods", namespace: sandboxNamespace, why: "relabelling a sandbox out of its policies"},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: sandboxNamespace, why: "evicting sandboxes"},
		{verb: "create", resource: "configmaps", namespace: ownNamespace, why: "nothing needs it: the policy travels in the pod's annotation"},
		{verb: "delete", resource: "configmaps", namespace: ownNamespace, why: "deleting sandprobe-policy"},
		{verb: "list", resource: "configmaps", namespace: ownNamespace, why: "reading configuration"},
		{verb: "list", resource: "configmaps", namespace: sandboxNamespace, why: "reading the sandboxes' configuration"},
		{verb: "get", resource: "secrets", namespace: sandboxNamespace, why: "the sandboxes' secrets"},
		{verb: "deletecollection", resource: "pods", namespace: ownNamespace, why: "mass deletion it never needs"},
		{verb: "get", resource: "pods", namespace: "sandboxes", why: "get is only for its own probe pods (drift lists)"},
		{verb: "get", resource: "pods", subresource: "log", namespace: sandboxNamespace, why: "reading sandboxes' logs (the probe's result comes from its termination message)"},
		{verb: "create", resource: "pods", subresource: "exec", namespace: sandboxNamespace, why: "exec into sandboxes"},
		{verb: "update", resource: "pods", namespace: ownNamespace, why: "changing a probe pod after the fact"},
		{verb: "patch", resource: "pods", namespace: ownNamespace, why: "changing a probe pod after the fact"},
		{verb: "create", resource: "pods", subresource: "exec", namespace: ownNamespace, why: "exec into pods"},
		{verb: "get", resource: "pods", subresource: "exec", namespace: ownNamespace, why: "exec into pods (websocket)"},
		{verb: "create", resource: "pods", subresource: "attach", namespace: ownNamespace, why: "attach to pods"},
		{verb: "create", resource: "pods", subresource: "portforward", namespace: ownNamespace, why: "port-forward into pods"},
		{verb: "patch", resource: "pods", subresource: "ephemeralcontainers", namespace: ownNamespace, why: "debug containers"},
		{verb: "update", resource: "pods", subresource: "status", namespace: ownNamespace, why: "forging a probe pod's result"},
		{verb: "update", resource: "nodes", name: "worker-1", why: "changing nodes"},
		{verb: "patch", resource: "nodes", name: "worker-1", why: "changing nodes"},
		{verb: "delete", resource: "nodes", name: "worker-1", why: "removing nodes"},
		{verb: "get", resource: "nodes", subresource: "proxy", name: "worker-1", why: "the kubelet API (exec, logs of every pod)"},
		{verb: "watch", resource: "nodes", why: "nothing needs it"},
		{verb: "update", resource: "configmaps", namespace: ownNamespace, name: "sandprobe-policy", why: "rewriting its own policy"},
		{verb: "patch", resource: "configmaps", namespace: ownNamespace, name: "sandprobe-policy", why: "rewriting its own policy"},
		{verb: "create", resource: "configmaps", namespace: "sandboxes", why: "configuration of others"},
		{verb: "list", resource: "configmaps", namespace: allNamespaces, why: "configuration of others"},
		{verb: "get", resource: "configmaps", namespace: "kube-system", name: "kube-proxy", why: "configuration of others"},
		{verb: "list", resource: "events", namespace: allNamespaces, why: "events of others"},
		{verb: "create", resource: "events", namespace: ownNamespace, why: "nothing needs it"},
		{verb: "create", group: "networking.k8s.io", resource: "networkpolicies", namespace: "sandboxes", why: "opening egress"},
		{verb: "delete", group: "networking.k8s.io", resource: "networkpolicies", namespace: "sandboxes", why: "opening egress"},
		{verb: "patch", group: "cilium.io", resource: "ciliumnetworkpolicies", namespace: "sandboxes", why: "opening egress"},
		{verb: "update", group: "agents.x-k8s.io", resource: "sandboxes", namespace: "sandboxes", why: "changing sandboxes"},
		{verb: "create", group: "agents.x-k8s.io", resource: "sandboxes", namespace: "sandboxes", why: "starting sandboxes"},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: ownNamespace, name: "sandprobe", why: "minting tokens"},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: "kube-system", name: "default", why: "minting tokens"},
		{verb: "impersonate", resource: "users", name: "admin", why: "becoming someone else"},
		{verb: "impersonate", resource: "serviceaccounts", namespace: "kube-system", name: "default", why: "becoming someone else"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "roles", namespace: ownNamespace, why: "widening its own role"},
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "cluster-admin", why: "binding cluster-admin"},
		{verb: "update", group: "rbac.authorization.k8s.io", resource: "roles", namespace: ownNamespace, name: "sandprobe-runner", why: "widening its own role"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: ownNamespace, why: "granting itself more"},
		{verb: "update", group: "rbac.authorization.k8s.io", resource: "roles", namespace: sandboxNamespace, name: "sandprobe-probe", why: "widening its rights next to the sandboxes"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: sandboxNamespace, why: "granting itself more next to the sandboxes"},
		{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies", name: "sandprobe-runner-scope", why: "switching off its own guard"},
		{verb: "delete", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings", name: "sandprobe-created-by", why: "switching off the creator check"},
		{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies", name: "sandprobe-sandbox-runtime", why: "switching off the runtime-class guard"},
		{verb: "delete", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings", name: "sandprobe-sandbox-runtime", why: "switching off the runtime-class guard"},
		{verb: "patch", resource: "namespaces", name: ownNamespace, why: "relaxing Pod Security on its own namespace"},
		{verb: "create", group: "batch", resource: "jobs", namespace: ownNamespace, why: "running more than its schedule"},
		{verb: "update", group: "batch", resource: "cronjobs", namespace: ownNamespace, name: "sandprobe", why: "changing its own command, or the images its guard allows"},
		{verb: "create", group: "certificates.k8s.io", resource: "certificatesigningrequests", why: "obtaining credentials"},
		{verb: "get", group: "node.k8s.io", resource: "runtimeclasses", name: "gvisor", why: "nothing needs it"},
	}
	client := appliedBase(t)
	for _, a := range denied {
		t.Run(a.String(), func(t *testing.T) {
			if ok, reason := can(t, client, a); ok {
				t.Errorf("%s: allowed (%s); it must not be: %s", a, reason, a.why)
			}
		})
	}
}

// can asks the API server's authorizer whether the ServiceAccount may do a.
func can(t *testing.T, client kubernetes.Interface, a access) (bool, string) {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   serviceAccountUser,
		Groups: serviceAccountGroups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
			Namespace: a.namespace, Name: a.name,
		},
	}}
	res, err := client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview for %s: %v", a, err)
	}
	if res.Status.EvaluationError != "" {
		t.Fatalf("SubjectAccessReview for %s: evaluation error: %s", a, res.Status.EvaluationError)
	}
	reason := res.Status.Reason
	if reason == "" {
		reason = "no rule"
	}
	return res.Status.Allowed, reason
}
