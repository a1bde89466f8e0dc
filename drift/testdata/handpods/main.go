// Command handpods writes N sandbox pods the way people write manifests,
// not the way yaml.Marshal does: the second input of the manifest-reading
// benchmark (genpods is the first), so the reader is measured on more than
// one generator's shape. Every document starts with a comment; a quarter
// of the pods are plain block YAML with sequences indented under their
// key; a quarter use flow collections (`labels: {…}`, `drop: [ALL]`,
// `command: ["sh", "-c"]`, `- {name: tmp, mountPath: /tmp}`); a quarter carry block scalars (`args: - |`,
// an annotation written `>-`); a quarter are four-container pods with
// 40-entry env lists, quoted values and trailing comments. Every 25th
// document is a `kind: List` of four pods, every 20th a Deployment with
// three containers and long env lists, and the rendered egress
// NetworkPolicy comes last. The pods drift in the same proportions as
// genpods' (a quarter hardened, a quarter tagged without limits, a
// quarter plain, a quarter without the sandbox label).
//
//	handpods -n 10000 -o pods.yaml [-policy fixtures/policy.yaml]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

func main() {
	n := flag.Int("n", 10000, "pods")
	out := flag.String("o", "-", "output file")
	policyPath := flag.String("policy", "fixtures/policy.yaml", "the SandboxPolicy the pods are judged by")
	flag.Parse()
	p, _, err := policy.LoadFile(*policyPath)
	if err != nil {
		fail(err)
	}
	f := os.Stdout
	if *out != "-" {
		if f, err = os.Create(*out); err != nil {
			fail(err)
		}
	}
	w := bufio.NewWriterSize(f, 1<<20)
	g := gen{w: w, ns: p.Spec.Namespaces[0], uid: p.Spec.Identity.UID}
	for doc, pods := 0, 0; pods < *n; doc++ {
		switch {
		case doc%25 == 24 && *n-pods >= 4:
			g.list(pods)
			pods += 4
		case doc%20 == 19:
			g.deployment(doc)
		default:
			g.pod(pods, "", false)
			pods++
		}
	}
	b, err := yaml.Marshal(render.NetworkPolicy(p, g.ns))
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(w, "---\n# the sandboxes' egress policy, as rendered\n%s", b)
	if err := w.Flush(); err != nil {
		fail(err)
	}
	if err := f.Close(); err != nil {
		fail(err)
	}
}

type gen struct {
	w   *bufio.Writer
	ns  string
	uid int64
}

func (g *gen) printf(format string, a ...any) { fmt.Fprintf(g.w, format, a...) }

// pod writes pod i with its keys at indent ind: a document of its own
// (a separator and a comment first), or an item of a List.
func (g *gen) pod(i int, ind string, item bool) {
	shape, drift := i%4, (i/4)%4
	x := ind
	if item {
		x = ind[:len(ind)-2] + "- "
	} else {
		g.printf("---\n# agent sandbox %d (shape %d), owned by team-%d\n", i, shape, i%13)
	}
	g.printf("%sapiVersion: v1\n%skind: Pod\n%smetadata:\n", x, ind, ind)
	g.printf("%s  name: hand-%d\n%s  namespace: %s\n", ind, i, ind, g.ns)
	sandbox := `"true"`
	if drift == 3 {
		sandbox = `"false"`
	}
	switch shape {
	case 1:
		g.printf("%s  labels: {sandbox: %s, app: agent, team: team-%d}\n", ind, sandbox, i%13)
	default:
		g.printf("%s  labels:\n%s    sandbox: %s  # what marks a sandbox\n%s    app: agent\n%s    team: team-%d\n", ind, ind, sandbox, ind, ind, i%13)
	}
	if shape == 2 {
		g.printf("%s  annotations:\n%s    description: >-\n%s      an agent sandbox written by hand,\n%s      folded onto two lines\n", ind, ind, ind, ind)
	}
	g.printf("%sspec:\n", ind)
	if drift != 2 {
		g.printf("%s  automountServiceAccountToken: false\n%s  enableServiceLinks: false\n%s  runtimeClassName: kata\n", ind, ind, ind)
		if shape == 1 {
			g.printf("%s  securityContext: {runAsNonRoot: true, runAsUser: %d, runAsGroup: %d, fsGroup: %d, seccompProfile: {type: RuntimeDefault}}\n", ind, g.uid, g.uid, g.uid)
		} else {
			g.printf("%s  securityContext:\n%s    runAsNonRoot: true\n%s    runAsUser: %d\n%s    runAsGroup: %d\n%s    fsGroup: %d\n%s    seccompProfile:\n%s      type: RuntimeDefault\n",
				ind, ind, ind, g.uid, ind, g.uid, ind, g.uid, ind, ind)
		}
	}
	g.printf("%s  restartPolicy: Never\n%s  containers:\n", ind, ind)
	containers := 2
	if shape == 3 {
		containers = 4
	}
	for c := 0; c < containers; c++ {
		g.container(i, c, shape, drift, ind+"  ")
	}
	tmp := ind + "      emptyDir:\n" + ind + "        sizeLimit: 8Gi\n"
	if shape == 1 {
		tmp = ind + "      emptyDir: {sizeLimit: 8Gi}\n"
	}
	g.printf("%s  volumes:\n%s    - name: workspace\n%s      emptyDir:\n%s        sizeLimit: 8Gi\n%s    - name: tmp\n%s", ind, ind, ind, ind, ind, tmp)
}

// container writes container c of pod i in the pod's shape, its drift
// decided by drift (0 hardened, 1 tagged without limits, 2 plain).
func (g *gen) container(i, c, shape, drift int, ind string) {
	image := fmt.Sprintf("registry.example/agents/c%d@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", c)
	if drift == 1 || drift == 2 {
		image = fmt.Sprintf("registry.example/agents/c%d:v%d", c, i%7)
	}
	g.printf("%s  - name: c%d   # container %d\n%s    image: %s\n", ind, c, c, ind, image)
	switch shape {
	case 1:
		g.printf("%s    command: [\"sh\", \"-c\"]\n%s    args: [\"exec agent --port %d\"]\n", ind, ind, 8080+c)
	case 2:
		g.printf("%s    command:\n%s      - sh\n%s      - -c\n%s    args:\n%s      - |\n%s        set -e\n%s        echo starting %d\n%s        exec agent --port %d\n",
			ind, ind, ind, ind, ind, ind, ind, i, ind, 8080+c)
	}
	envs := 6
	if shape == 3 {
		envs = 40
	}
	g.printf("%s    env:\n", ind)
	for e := 0; e < envs; e++ {
		g.printf("%s      - name: AGENT_SETTING_%d\n%s        value: \"value-%d-%d\"  # setting %d\n", ind, e, ind, i, e, e)
	}
	if drift == 2 {
		g.printf("%s      - name: GITHUB_TOKEN\n%s        value: ghp_%d\n", ind, ind, i)
		return
	}
	if drift == 0 || drift == 3 {
		if shape == 1 {
			g.printf("%s    resources:\n%s      limits: {memory: 6Gi, ephemeral-storage: 8Gi}\n%s      requests: {memory: 6Gi, ephemeral-storage: 8Gi}\n", ind, ind, ind)
		} else {
			g.printf("%s    resources:\n%s      limits:\n%s        memory: 6Gi\n%s        ephemeral-storage: 8Gi\n%s      requests:\n%s        memory: 6Gi\n%s        ephemeral-storage: 8Gi\n",
				ind, ind, ind, ind, ind, ind, ind)
		}
	}
	ro := "true"
	if drift == 3 {
		ro = "false"
	}
	if shape == 1 {
		g.printf("%s    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: %s, capabilities: {drop: [ALL]}}\n", ind, ro)
	} else {
		g.printf("%s    securityContext:\n%s      allowPrivilegeEscalation: false\n%s      readOnlyRootFilesystem: %s\n%s      capabilities:\n%s        drop:\n%s          - ALL\n",
			ind, ind, ind, ro, ind, ind, ind)
	}
	if shape == 1 {
		g.printf("%s    volumeMounts:\n%s      - {name: workspace, mountPath: /workspace}\n%s      - {name: tmp, mountPath: /tmp}\n", ind, ind, ind)
		return
	}
	g.printf("%s    volumeMounts:\n%s      - name: workspace\n%s        mountPath: /workspace\n%s      - name: tmp\n%s        mountPath: /tmp\n", ind, ind, ind, ind, ind)
}

// list writes a List of four pods from pod i on.
func (g *gen) list(i int) {
	g.printf("---\n# a kubectl get -o yaml dump of four sandboxes\napiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n")
	for k := 0; k < 4; k++ {
		g.pod(i+k, "    ", true)
	}
}

// deployment writes a Deployment of three containers with long env lists.
func (g *gen) deployment(doc int) {
	g.printf("---\n# a worker pool\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: pool-%d\n  namespace: %s\n  labels: {app: pool-%d}\nspec:\n  replicas: 3\n  selector:\n    matchLabels:\n      app: pool-%d\n  template:\n", doc, g.ns, doc, doc)
	g.printf("    metadata:\n      labels:\n        app: pool-%d\n        sandbox: \"true\"\n", doc)
	g.printf("    spec:\n      automountServiceAccountToken: false\n      securityContext:\n        runAsNonRoot: true\n        runAsUser: %d\n        seccompProfile: {type: RuntimeDefault}\n      containers:\n", g.uid)
	for c := 0; c < 3; c++ {
		g.container(doc, c, 3, doc%3, "      ")
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "handpods:", err)
	os.Exit(1)
}
