package main

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// The Kubernetes-native recipes of docs/ci.md. The Task and the
// WorkflowTemplate are decoded strictly into the fields of Tekton's and
// Argo's published schemas that they use (tektoncd/pipeline
// pkg/apis/pipeline/v1/swagger.json, argoproj/argo-workflows
// api/jsonschema/schema.json, read in August 2026): a misspelt or misplaced
// field is an error here, as the API server's schema would make it one.

type tektonTask struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Description string `json:"description"`
		Params      []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			Default     string `json:"default"`
			Description string `json:"description"`
		} `json:"params"`
		Workspaces []struct {
			Name        string `json:"name"`
			ReadOnly    bool   `json:"readOnly"`
			Description string `json:"description"`
		} `json:"workspaces"`
		Steps []recipeContainer `json:"steps"`
	} `json:"spec"`
}

// recipeContainer is the part of a Tekton Step or an Argo template's
// container the recipes use.
type recipeContainer struct {
	Name         string   `json:"name"`
	Image        string   `json:"image"`
	Command      []string `json:"command"`
	Args         []string `json:"args"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
}

type argoWorkflowTemplate struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		ServiceAccountName string `json:"serviceAccountName"`
		Entrypoint         string `json:"entrypoint"`
		Arguments          struct {
			Parameters []struct {
				Name        string `json:"name"`
				Value       string `json:"value"`
				Description string `json:"description"`
			} `json:"parameters"`
		} `json:"arguments"`
		Volumes []struct {
			Name      string `json:"name"`
			ConfigMap struct {
				Name string `json:"name"`
			} `json:"configMap"`
		} `json:"volumes"`
		Templates []struct {
			Name      string          `json:"name"`
			Container recipeContainer `json:"container"`
		} `json:"templates"`
	} `json:"spec"`
}

// documents splits a YAML stream at its "---" lines.
func documents(s string) []string {
	var out []string
	for _, d := range strings.Split("\n"+s, "\n---\n") {
		if strings.TrimSpace(d) != "" {
			out = append(out, d)
		}
	}
	return out
}

// verifyStep checks one step's sandprobe command line against the binary:
// verify-image, on the kube backend, in a named namespace.
func verifyStep(t *testing.T, bin string, c recipeContainer) {
	t.Helper()
	if !slices.Equal(c.Command, []string{"/sandprobe"}) {
		t.Errorf("step %q runs %v, want [/sandprobe] (the image has no shell)", c.Name, c.Command)
		return
	}
	v := checkCommand(t, bin, shellCommand{args: c.Args})
	if c.Args[0] != "verify-image" || v["backend"] != "kube" || v["namespace"] == "" || v["image"] == "" {
		t.Errorf("step %q: want verify-image --backend kube with a namespace and an image: %v", c.Name, c.Args)
	}
}

// TestCIRecipesKube: the Tekton Task, the Argo WorkflowTemplate and the
// GitLab Kubernetes-executor job parse strictly, run verify-image on the
// kube backend with flags the binary has, and the RBAC grants exactly what
// the kube backend calls, in the verification namespace only.
func TestCIRecipesKube(t *testing.T) {
	bin := testenv.Binary(t)
	blocks := ciBlocks(t)
	t.Run("Tekton", func(t *testing.T) {
		var task tektonTask
		if err := yaml.UnmarshalStrict([]byte(blocks["tekton/sandprobe-verify-image.yaml"]), &task); err != nil {
			t.Fatalf("the Task: %v", err)
		}
		if task.APIVersion != "tekton.dev/v1" || task.Kind != "Task" || len(task.Spec.Steps) != 1 {
			t.Fatalf("%s %s with %d steps: want one tekton.dev/v1 Task step", task.APIVersion, task.Kind, len(task.Spec.Steps))
		}
		verifyStep(t, bin, task.Spec.Steps[0])
	})
	t.Run("Argo", func(t *testing.T) {
		docs := documents(blocks["argo/sandprobe-verify-image.yaml"])
		var wt argoWorkflowTemplate
		if err := yaml.UnmarshalStrict([]byte(docs[0]), &wt); err != nil {
			t.Fatalf("the WorkflowTemplate: %v", err)
		}
		if wt.APIVersion != "argoproj.io/v1alpha1" || wt.Kind != "WorkflowTemplate" || len(wt.Spec.Templates) != 1 || wt.Spec.Entrypoint != wt.Spec.Templates[0].Name {
			t.Fatalf("%s %s: want an argoproj.io/v1alpha1 WorkflowTemplate whose one template is its entrypoint", wt.APIVersion, wt.Kind)
		}
		if wt.Spec.ServiceAccountName != "sandprobe-verify-image" {
			t.Errorf("runs as %q, want the recipe's service account", wt.Spec.ServiceAccountName)
		}
		verifyStep(t, bin, wt.Spec.Templates[0].Container)
		checkRBAC(t, docs[1:], map[string][]string{"argoproj.io/workflowtaskresults": {"create", "patch"}}, "ci")
	})
	t.Run("RBAC", func(t *testing.T) {
		checkRBAC(t, documents(blocks["rbac/sandprobe-verify-image.yaml"]), map[string][]string{
			"/pods": {"create", "get", "list", "watch", "delete"}, "/pods/log": {"get"}, "/events": {"list"}, "/nodes": {"get"},
		}, "sandbox-verify")
	})
	t.Run("GitLab Kubernetes executor", func(t *testing.T) {
		var jobs map[string]struct {
			Script    []string `json:"script"`
			Variables map[string]string
			Artifacts struct {
				When    string `json:"when"`
				Reports struct {
					JUnit []string `json:"junit"`
				} `json:"reports"`
			} `json:"artifacts"`
		}
		if err := yaml.Unmarshal([]byte(blocks[".gitlab-ci.yml on the Kubernetes executor"]), &jobs); err != nil || len(jobs) != 1 {
			t.Fatalf("want one job: %v", err)
		}
		for name, job := range jobs {
			var junit []string
			for _, c := range sandprobeCommands(t, strings.Join(job.Script, "\n")) {
				v := checkCommand(t, bin, c)
				if c.args[0] == "verify-image" && v["backend"] != "kube" {
					t.Errorf("job %s: verify-image without --backend kube", name)
				}
				if v["junit"] != "" {
					junit = append(junit, v["junit"])
				}
			}
			if job.Artifacts.When != "always" || !slices.Equal(junit, job.Artifacts.Reports.JUnit) {
				t.Errorf("job %s: artifacts when %q, junit %v; its commands write %v", name, job.Artifacts.When, job.Artifacts.Reports.JUnit, junit)
			}
			if job.Variables["KUBERNETES_SERVICE_ACCOUNT_OVERWRITE"] != "sandprobe-verify-image" {
				t.Errorf("job %s does not run as the recipe's service account", name)
			}
		}
	})
}

// checkRBAC: the Roles and ClusterRoles grant exactly want (group/resource
// → verbs), every Role sits in namespace ns, and everything bound is bound
// to the recipe's service account.
func checkRBAC(t *testing.T, docs []string, want map[string][]string, ns string) {
	t.Helper()
	got := map[string][]string{}
	for _, d := range docs {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(d), &meta); err != nil {
			t.Fatal(err)
		}
		var rules []rbacv1.PolicyRule
		switch meta.Kind {
		case "Role", "ClusterRole":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(d), &r); err != nil {
				t.Fatalf("%s: %v", meta.Kind, err)
			}
			if meta.Kind == "Role" && r.Namespace != ns {
				t.Errorf("Role %s is in %q, want %s", r.Name, r.Namespace, ns)
			}
			rules = r.Rules
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict([]byte(d), &b); err != nil {
				t.Fatalf("%s: %v", meta.Kind, err)
			}
			if len(b.Subjects) != 1 || b.Subjects[0].Name != "sandprobe-verify-image" {
				t.Errorf("%s %s binds %v, want the recipe's service account only", meta.Kind, b.Name, b.Subjects)
			}
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					got[g+"/"+res] = append(got[g+"/"+res], r.Verbs...)
				}
			}
		}
	}
	for k, verbs := range want {
		if !slices.Equal(got[k], verbs) {
			t.Errorf("%s: verbs %v, want %v", k, got[k], verbs)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s is granted, and nothing the recipe runs needs it", k)
		}
	}
}
