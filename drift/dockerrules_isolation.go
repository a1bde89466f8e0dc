package drift

import (
	"strings"

	"github.com/sandprobe/sandprobe/policy"
)

// What keeps a container apart from its host: no privilege, no shared
// namespace, its seccomp and AppArmor profiles, no host device, the
// isolation runtime, and a pinned image.
const (
	DockerPrivileged     = "drift.docker.privileged"
	DockerHostNamespaces = "drift.docker.host-namespaces"
	DockerSeccomp        = "drift.docker.seccomp"
	DockerAppArmor       = "drift.docker.apparmor"
	DockerDevices        = "drift.docker.devices"
	DockerRuntime        = "drift.docker.runtime"
	DockerImageDigest    = "drift.docker.image-digest"
)

var dockerIsolationRules = []dockerRule{
	{row{Rule{DockerPrivileged, "the container is not privileged", critical, "remove --privileged"}, nil}, checkDockerPrivileged},
	{row{Rule{DockerHostNamespaces, "the container shares no namespace with the host", critical,
		"remove --pid/--ipc/--uts/--userns host"}, nil}, checkDockerHostNamespaces},
	{row{Rule{DockerSeccomp, "the container runs under a seccomp filter", medium, "remove --security-opt seccomp=unconfined"},
		func(s *policy.Spec) bool { return s.Seccomp != policy.SeccompUnconfined }}, checkDockerSeccomp},
	{row{Rule{DockerAppArmor, "the container is not AppArmor-unconfined", medium, "remove --security-opt apparmor=unconfined"}, nil}, checkDockerAppArmor},
	{row{Rule{DockerDevices, "no host device is passed in", critical, "remove --device"}, nil}, checkDockerDevices},
	{row{Rule{DockerRuntime, "the container runs under a declared isolation runtime", high, "add --runtime NAME"},
		func(s *policy.Spec) bool { return len(s.Runtime.ClassNames) > 0 }}, checkDockerRuntime},
	{row{Rule{DockerImageDigest, "the container was created from an image pinned by digest", medium, "reference the image as REPO@sha256:DIGEST"},
		func(s *policy.Spec) bool { return s.Image.RequireDigest }}, checkDockerImageDigest},
}

func checkDockerPrivileged(d *dockerCheck, c *DockerContainer) {
	if c.HostConfig.Privileged {
		d.failAt(dockerAt(dPrivileged, 0, "HostConfig.Privileged"), "false", "true", "remove --privileged", "every capability and every host device")
	}
}

func checkDockerHostNamespaces(d *dockerCheck, c *DockerContainer) {
	hc := &c.HostConfig
	for _, ns := range [...]struct{ field, mode, flag string }{
		{"HostConfig.PidMode", hc.PidMode, "--pid"}, {"HostConfig.IpcMode", hc.IpcMode, "--ipc"},
		{"HostConfig.UTSMode", hc.UTSMode, "--uts"}, {"HostConfig.UsernsMode", hc.UsernsMode, "--userns"},
	} {
		if ns.mode == "host" || strings.HasPrefix(ns.mode, "container:") {
			d.failAt(dockerAt(dNamespaces, 0, ns.field), "a private namespace", ns.mode, "remove "+ns.flag+" "+ns.mode, "")
		}
	}
}

// checkDockerSeccomp and checkDockerAppArmor share HostConfig.SecurityOpt:
// their findings are listed in the options' order.
func checkDockerSeccomp(d *dockerCheck, c *DockerContainer) {
	for i, opt := range c.HostConfig.SecurityOpt {
		if k, v := splitSecurityOpt(opt); k == "seccomp" && v == "unconfined" {
			d.failAt(dockerAt(dSecurityOpt, i, "HostConfig.SecurityOpt"), "Docker's default seccomp profile (or a stricter one)", opt, "remove --security-opt "+opt, "")
		}
	}
}

func checkDockerAppArmor(d *dockerCheck, c *DockerContainer) {
	for i, opt := range c.HostConfig.SecurityOpt {
		if k, v := splitSecurityOpt(opt); k == "apparmor" && v == "unconfined" {
			d.failAt(dockerAt(dSecurityOpt, i, "HostConfig.SecurityOpt"), "the default AppArmor profile", opt, "remove --security-opt "+opt, "")
		}
	}
}

func checkDockerDevices(d *dockerCheck, c *DockerContainer) {
	for _, dev := range c.HostConfig.Devices {
		d.failAt(dockerAt(dDevices, 0, "HostConfig.Devices["+dev.PathOnHost+"]"), "no host devices", dev.PathOnHost+" → "+dev.PathInContainer, "remove --device "+dev.PathOnHost, "")
	}
}

func checkDockerRuntime(d *dockerCheck, c *DockerContainer) {
	rt := c.HostConfig.Runtime
	if d.e.classes[rt] {
		return
	}
	classes := d.e.p.Spec.Runtime.ClassNames
	d.failAt(dockerAt(dRuntime, 0, "HostConfig.Runtime"), "one of "+strings.Join(classes, ", "), orDefault(rt, "the daemon's default (runc)"),
		"add --runtime "+classes[0], "")
}

func checkDockerImageDigest(d *dockerCheck, c *DockerContainer) {
	if img := c.Config.Image; !strings.Contains(img, "@sha256:") {
		d.failAt(dockerAt(dImage, 0, "Config.Image"), "an image pinned by digest (@sha256:…)", img, "run "+imageRepo(img)+"@sha256:<digest>", "image ID "+c.Image)
	}
}
