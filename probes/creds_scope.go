package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// grant is one verb on one resource of one API group, as RBAC names it; a
// resource may carry its subresource ("pods/exec"), any part may be "*".
type grant struct{ group, resource, verb string }

func (g grant) String() string {
	if g == (grant{"*", "*", "*"}) {
		return "every verb on everything (*)"
	}
	r := g.resource
	if g.group != "" && g.group != "*" {
		r += "." + g.group
	} else if g.group == "*" && g.resource != "*" {
		r += ".*"
	}
	return g.verb + " " + r
}

// scopeQuestions are the verbs that matter, asked one by one
// (SelfSubjectAccessReview) besides the rules review: reading secrets,
// starting or entering pods, minting tokens, impersonating, binding roles,
// writing workloads — and everything at once. cluster marks a question
// about a cluster-wide resource.
var scopeQuestions = []struct {
	grant
	cluster bool
}{
	{grant{"", "secrets", "get"}, false}, {grant{"", "secrets", "list"}, false}, {grant{"", "secrets", "watch"}, false},
	{grant{"", "pods", "create"}, false}, {grant{"", "pods/exec", "create"}, false}, {grant{"", "pods/attach", "create"}, false},
	{grant{"", "pods/portforward", "create"}, false}, {grant{"", "pods", "delete"}, false},
	{grant{"", "serviceaccounts/token", "create"}, false}, {grant{"", "serviceaccounts", "impersonate"}, false},
	{grant{"", "configmaps", "update"}, false}, {grant{"apps", "deployments", "create"}, false},
	{grant{"rbac.authorization.k8s.io", "rolebindings", "create"}, false},
	{grant{"", "nodes/proxy", "get"}, true}, {grant{"*", "*", "*"}, true},
}

// readVerbs are what view-only allows.
var readVerbs = []string{"get", "list", "watch"}

// selfReviews are what every authenticated user may create (asking about
// itself): the probe's own questions, never beyond a scope.
var selfReviews = []grant{
	{"authorization.k8s.io", "selfsubjectaccessreviews", "create"},
	{"authorization.k8s.io", "selfsubjectrulesreviews", "create"},
	{"authentication.k8s.io", "selfsubjectreviews", "create"},
}

// actingResource is a resource whose read is an action or a secret:
// secrets, and the subresources that run, attach or tunnel (exec, attach,
// portforward, proxy; "pods/*" and "*" include them).
func actingResource(r string) bool {
	if r == "*" || r == "secrets" || strings.HasSuffix(r, "/*") {
		return true
	}
	_, sub, ok := strings.Cut(r, "/")
	return ok && slices.Contains([]string{"exec", "attach", "portforward", "proxy"}, sub)
}

// covers reports whether the declared scope allows the grant. A wildcard
// granted is covered only by a wildcard declared: "*" verbs include every
// write, "*" resources include secrets.
func covers(s policy.CredentialScope, g grant) bool {
	if slices.Contains(selfReviews, g) {
		return true
	}
	if s.Preset == policy.ScopeViewOnly && slices.Contains(readVerbs, g.verb) && !actingResource(g.resource) && g.group != "*" {
		return true
	}
	for _, r := range s.Allow {
		groups := r.APIGroups
		if len(groups) == 0 {
			groups = []string{""}
		}
		if (slices.Contains(groups, g.group) || slices.Contains(groups, "*")) &&
			(slices.Contains(r.Resources, g.resource) || slices.Contains(r.Resources, "*") || prefixWildcard(r.Resources, g.resource)) &&
			(slices.Contains(r.Verbs, g.verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

// prefixWildcard: "pods/*" declared covers "pods/log".
func prefixWildcard(declared []string, r string) bool {
	base, _, ok := strings.Cut(r, "/")
	return ok && slices.Contains(declared, base+"/*")
}

// The review objects, as the API server takes and answers them.
type (
	rulesReview struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Namespace string `json:"namespace"`
		} `json:"spec"`
		Status struct {
			ResourceRules []struct {
				Verbs, APIGroups, Resources, ResourceNames []string
			} `json:"resourceRules"`
			NonResourceRules []struct {
				Verbs           []string `json:"verbs"`
				NonResourceURLs []string `json:"nonResourceURLs"`
			} `json:"nonResourceRules"`
			Incomplete      bool   `json:"incomplete"`
			EvaluationError string `json:"evaluationError"`
		} `json:"status"`
	}
	accessReview struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			ResourceAttributes map[string]string `json:"resourceAttributes"`
		} `json:"spec"`
		Status struct {
			Allowed bool   `json:"allowed"`
			Reason  string `json:"reason"`
		} `json:"status"`
	}
	selfReview struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Status     struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}
)

func checkCredsScope(ctx context.Context, env *Env) []result.Finding {
	var out []result.Finding
	for _, cr := range env.Policy.Spec.Credentials {
		if cr.Kubernetes == nil {
			continue
		}
		out = append(out, credScope(ctx, cr, env.Environ)...)
	}
	return out
}

// credScope asks the API server, with the credential, what it may do in
// each namespace, and compares that with the declared scope. Every string
// of every finding is scrubbed of the credential's secrets at the end: the
// token must appear in no output, whatever a server or library echoes.
func credScope(ctx context.Context, cr policy.Credential, environ []string) (out []result.Finding) {
	scope := cr.Kubernetes.Scope
	exp := describeScope(scope)
	if _, err := os.Stat(cr.MountPath); os.IsNotExist(err) {
		f := result.Finding{Subject: cr.Name, Status: result.Skip, Expected: exp,
			Actual:   fmt.Sprintf("the credential is not mounted at %s where the probe runs: nothing to ask the API server with", cr.MountPath),
			Evidence: "the kube runner does not mount sandbox credentials into its probe pod; the local and docker runners do (from spec.credentials[].source)"}
		return []result.Finding{f}
	}
	c, err := loadKubeCred(cr, environ)
	if err != nil {
		f := errorf(cr.Name, "%v", err)
		f.Expected, f.Fix = exp, "mount the credential where the policy says, in a form the probe reads (a kubeconfig with a token or client certificate, or a token with kubernetes.server)"
		return []result.Finding{f}
	}
	defer func() {
		for i := range out {
			scrubFinding(&out[i], c.secrets)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	who := whoAmI(ctx, c)
	namespaces := cr.Kubernetes.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{c.namespace}
		if c.namespace == "" {
			namespaces = []string{"default"}
		}
	}
	for _, ns := range namespaces {
		out = append(out, judgeScope(ctx, c, cr.Name, ns, scope, exp, who))
	}
	return out
}

// whoAmI is the user the API server sees (SelfSubjectReview, Kubernetes
// 1.28+): names, never secrets. "" when the server cannot say.
func whoAmI(ctx context.Context, c *kubeCred) string {
	var r selfReview
	r.APIVersion, r.Kind = "authentication.k8s.io/v1", "SelfSubjectReview"
	if err := c.post(ctx, "/apis/authentication.k8s.io/v1/selfsubjectreviews", r, &r); err != nil || r.Status.UserInfo.Username == "" {
		return ""
	}
	return fmt.Sprintf("user %s (groups %s)", r.Status.UserInfo.Username, strings.Join(r.Status.UserInfo.Groups, ", "))
}

func judgeScope(ctx context.Context, c *kubeCred, name, ns string, scope policy.CredentialScope, exp, who string) result.Finding {
	subject := name + " namespace/" + ns
	var rr rulesReview
	rr.APIVersion, rr.Kind = "authorization.k8s.io/v1", "SelfSubjectRulesReview"
	rr.Spec.Namespace = ns
	if err := c.post(ctx, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", rr, &rr); err != nil {
		return scopeError(subject, exp, c, err)
	}
	excess, nonResource, rules := excessRules(&rr, scope)
	answers := askScopeQuestions(ctx, c, ns)
	var may, denied []string
	for _, a := range answers {
		if a.err != nil {
			return scopeError(subject, exp, c, a.err)
		}
		switch {
		case a.allowed && !covers(scope, a.grant):
			may = append(may, a.grant.String())
		case !a.allowed:
			denied = append(denied, a.grant.String())
		}
	}
	evidence := fmt.Sprintf("asked %s with %s", c.server, c.from)
	if who != "" {
		evidence += " as " + who
	}
	evidence += fmt.Sprintf("; SelfSubjectRulesReview: %d rules", rules)
	if rr.Status.Incomplete {
		evidence += " (incomplete: " + orNone(rr.Status.EvaluationError) + "; the access reviews below are authoritative)"
	}
	evidence += fmt.Sprintf("; SelfSubjectAccessReview of %d verbs that matter: denied %s", len(scopeQuestions), joinOr(denied, "none"))
	if len(excess)+len(nonResource) > 0 {
		evidence += "; rules beyond the scope: " + firstN(strings.Split(describeGrants(excess, nonResource), "; "), 12)
	}
	if len(may)+len(excess)+len(nonResource) > 0 {
		actual := "may do more than declared"
		if len(may) > 0 {
			actual += ": " + strings.Join(may, ", ")
		}
		if n := len(excess) + len(nonResource); n > 0 {
			actual += fmt.Sprintf(" (%s beyond the scope in its rules: %s)", count(n, "grant", "grants"), firstN(strings.Split(describeGrants(excess, nonResource), "; "), 4))
		}
		f := fail(subject, exp, actual, evidence)
		f.Fix = fmt.Sprintf("bind the credential's user to a role with no more than %s (for view-only: the built-in view ClusterRole, never edit or admin), or declare what it really needs in spec.credentials[].kubernetes.scope", describeScope(scope))
		return f
	}
	return pass(subject, exp, fmt.Sprintf("no more than declared: %d rules within the scope, every verb that matters beyond it denied", rules), evidence)
}

// excessRules expands every rule of the review to grants and returns what
// the scope does not cover (resource grants, and non-resource verbs other
// than get and head), and how many rules there were.
func excessRules(rr *rulesReview, scope policy.CredentialScope) (excess []grant, nonResource []string, rules int) {
	for _, r := range rr.Status.ResourceRules {
		rules++
		groups := r.APIGroups
		if len(groups) == 0 {
			groups = []string{""}
		}
		for _, g := range groups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if gr := (grant{g, res, v}); !covers(scope, gr) && !slices.Contains(excess, gr) {
						excess = append(excess, gr)
					}
				}
			}
		}
	}
	for _, r := range rr.Status.NonResourceRules {
		rules++
		for _, v := range r.Verbs {
			if v != "get" && v != "head" {
				nonResource = append(nonResource, v+" "+strings.Join(r.NonResourceURLs, ","))
			}
		}
	}
	return excess, nonResource, rules
}

// scopeAnswer is the API server's answer to one of scopeQuestions.
type scopeAnswer struct {
	grant
	allowed bool
	err     error
}

// askScopeQuestions asks the verbs that matter, one question each,
// answered by every authorizer (the rules review may be incomplete under
// a webhook).
func askScopeQuestions(ctx context.Context, c *kubeCred, ns string) []scopeAnswer {
	answers := make([]scopeAnswer, len(scopeQuestions)) // each goroutine writes its own slot
	p := pool.New().WithMaxGoroutines(4)
	for i, q := range scopeQuestions {
		p.Go(func() {
			var ar accessReview
			ar.APIVersion, ar.Kind = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
			res, sub, _ := strings.Cut(q.resource, "/")
			attrs := map[string]string{"verb": q.verb, "group": q.group, "resource": res}
			if sub != "" {
				attrs["subresource"] = sub
			}
			if !q.cluster {
				attrs["namespace"] = ns
			}
			ar.Spec.ResourceAttributes = attrs
			err := c.post(ctx, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ar, &ar)
			answers[i] = scopeAnswer{q.grant, ar.Status.Allowed, err}
		})
	}
	p.Wait()
	return answers
}

// scopeError is a question the API server did not answer: an error, never
// a pass (a refused credential proves nothing about its scope).
func scopeError(subject, exp string, c *kubeCred, err error) result.Finding {
	f := errorf(subject, "%v", err)
	f.Expected, f.Evidence = exp, "asked "+c.server+" with "+c.from
	f.Fix = "make the API server reachable from the sandbox with this credential"
	if errors.Is(err, errUnauthorized) {
		f.Fix = "renew the credential (a fresh token or certificate) or remove it from the sandbox and the policy"
	}
	return f
}

// describeGrants groups grants by resource: "pods (create, delete)".
func describeGrants(gs []grant, nonResource []string) string {
	by := map[string][]string{}
	for _, g := range gs {
		k := grant{group: g.group, resource: g.resource}.String()
		by[strings.TrimSpace(k)] = append(by[strings.TrimSpace(k)], g.verb)
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		vs := by[k]
		sort.Strings(vs)
		parts = append(parts, fmt.Sprintf("%s (%s)", k, strings.Join(vs, ", ")))
	}
	for _, n := range nonResource {
		parts = append(parts, "non-resource "+n)
	}
	return strings.Join(parts, "; ")
}

func describeScope(s policy.CredentialScope) string {
	var parts []string
	switch s.Preset {
	case policy.ScopeViewOnly:
		parts = append(parts, "view-only (get, list, watch; no secrets, exec, attach, portforward or proxy)")
	case policy.ScopeNone:
		parts = append(parts, "nothing beyond discovery and asking about itself")
	}
	for _, r := range s.Allow {
		groups := r.APIGroups
		if len(groups) == 0 {
			groups = []string{`""`}
		}
		parts = append(parts, fmt.Sprintf("%s on %s (%s)", strings.Join(r.Verbs, ","), strings.Join(r.Resources, ","), strings.Join(groups, ",")))
	}
	return "at most " + strings.Join(parts, " and ")
}

// scrubFinding replaces every secret in a finding's text.
func scrubFinding(f *result.Finding, secrets []string) {
	for _, s := range secrets {
		if len(s) < 8 {
			continue // too short to be a credential; replacing it would mangle words
		}
		for _, p := range []*string{&f.Subject, &f.Expected, &f.Actual, &f.Evidence, &f.Fix} {
			*p = strings.ReplaceAll(*p, s, "[redacted]")
		}
	}
}
