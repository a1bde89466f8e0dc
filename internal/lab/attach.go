package lab

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"text/template"
)

//go:embed attach.nft.tmpl
var attachTemplate string

var attachTmpl = template.Must(template.New("attach").Parse(attachTemplate))

var lookPath = exec.LookPath

// Attach connects a test cluster's pod network (in the root namespace) to
// the router as a second sandbox: pod traffic is masqueraded onto a lab
// address; the lab can answer but never start anything towards the host,
// and nothing reaches the machine's interfaces. With engine, the lab only
// routes the pods: the cluster's own NetworkPolicy engine keeps them in.
func (l *Lab) Attach(cidr string, engine bool) error {
	if err := l.requireUp(); err != nil {
		return err
	}
	l.detach()
	r := func(args ...string) error { return run("ip", append([]string{"-n", NSRouter}, args...)...) }
	steps := []func() error{
		func() error {
			return r("link", "add", IfRouterCluster, "type", "veth", "peer", "name", IfHostCluster, "netns", "1")
		},
		func() error {
			return r("addr", "add", fmt.Sprintf("%s/%d", AttachRouterIP4, AttachPrefix), "dev", IfRouterCluster)
		},
		func() error { return r("link", "set", IfRouterCluster, "up") },
		func() error {
			return run("ip", "addr", "add", fmt.Sprintf("%s/%d", AttachHostIP4, AttachPrefix), "dev", IfHostCluster)
		},
		func() error { return run("ip", "link", "set", IfHostCluster, "up") },
		func() error {
			return run("ip", "route", "add", "10.99.0.0/16", "via", AttachRouterIP4, "dev", IfHostCluster)
		},
		func() error { return run("sysctl", "-qw", "net.ipv4.conf."+IfHostCluster+".forwarding=1") },
		func() error {
			var b strings.Builder
			attachTmpl.Execute(&b, map[string]string{"Table": AttachNftTable, "If": IfHostCluster, "CIDR": cidr})
			return runIn(b.String(), "nft", "-f", "-")
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	mode := "sandbox"
	if engine {
		mode = "engine"
	}
	os.MkdirAll(l.statePath(""), 0o755)
	os.WriteFile(l.statePath("attached"), []byte(cidr+"\n"), 0o644)
	os.WriteFile(l.statePath("attach-mode"), []byte(mode+"\n"), 0o644)
	if err := l.applyNft(); err != nil {
		return err
	}
	if engine {
		l.say("attached: pods in %s reach the lab through %s as %s, unfiltered by the lab: the cluster's NetworkPolicy engine keeps them in", cidr, IfHostCluster, AttachHostIP4)
	} else {
		l.say("attached: pods in %s reach the lab through %s as %s, under the sandbox's rules", cidr, IfHostCluster, AttachHostIP4)
	}
	return nil
}

// Detach removes what Attach added.
func (l *Lab) Detach() error {
	l.detach()
	l.say("detached")
	return nil
}

func (l *Lab) detach() {
	if exec.Command("ip", "link", "show", IfHostCluster).Run() == nil {
		exec.Command("ip", "link", "del", IfHostCluster).Run()
	}
	if exec.Command("nft", "list", "table", "inet", "sp_lab_attach").Run() == nil {
		exec.Command("nft", "delete", "table", "inet", "sp_lab_attach").Run()
	}
	if l.Dir != "" && exists(l.statePath("attached")) {
		os.Remove(l.statePath("attached"))
		os.Remove(l.statePath("attach-mode"))
		if nsExists(NSRouter) {
			l.applyNft()
		}
	}
}
