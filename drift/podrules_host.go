package drift

import (
	"fmt"
	"strconv"
)

// What the sandbox shares with its node.
const (
	PodHostNetwork = "drift.pod.host-network"
	PodHostPID     = "drift.pod.host-pid"
	PodHostIPC     = "drift.pod.host-ipc"
	PodHostPorts   = "drift.pod.host-ports"
	PodHostPath    = "drift.pod.host-path"
)

var hostRules = []podRule{
	{row{Rule{PodHostNetwork, "the pod has its own network namespace", critical, "remove spec.hostNetwork"}, nil}, checkHostNetwork},
	{row{Rule{PodHostPID, "the pod has its own PID namespace", critical, "remove spec.hostPID"}, nil}, checkHostPID},
	{row{Rule{PodHostIPC, "the pod has its own IPC namespace", critical, "remove spec.hostIPC"}, nil}, checkHostIPC},
	{row{Rule{PodHostPorts, "no container binds a port on the node", medium, "remove hostPort from the container's ports"}, nil}, checkHostPorts},
	{row{Rule{PodHostPath, "no volume exposes a node path", critical,
		"replace the hostPath volume with an emptyDir, a secret or a configMap"}, nil}, checkHostPath},
}

func checkHostNetwork(c *podCheck, v *podView) {
	if v.ps.HostNetwork {
		at := v.at(fHostNetwork, ".hostNetwork")
		c.failAt(at, "false", "true", "remove "+at.path, "the pod sees and uses the node's network: no NetworkPolicy applies")
	}
}

func checkHostPID(c *podCheck, v *podView) {
	if v.ps.HostPID {
		at := v.at(fHostPID, ".hostPID")
		c.failAt(at, "false", "true", "remove "+at.path, "")
	}
}

func checkHostIPC(c *podCheck, v *podView) {
	if v.ps.HostIPC {
		at := v.at(fHostIPC, ".hostIPC")
		c.failAt(at, "false", "true", "remove "+at.path, "")
	}
}

func checkHostPorts(c *podCheck, v *podView) {
	for k := range v.containers() {
		for i := range k.c.Ports {
			if hp := k.c.Ports[i].HostPort; hp != 0 {
				at := k.at(fPorts, fmt.Sprintf(".ports[%d].hostPort", i))
				c.failAt(at, "no host port", strconv.Itoa(int(hp)), "remove "+at.path, "")
			}
		}
	}
}

func checkHostPath(c *podCheck, v *podView) {
	for i := range v.ps.Volumes {
		if hp := v.ps.Volumes[i].HostPath; hp != nil {
			at := v.atVolume(i, ".hostPath")
			c.failAt(at, "no hostPath volume", "hostPath "+hp.Path, "replace "+at.path+" with an emptyDir (or a secret/configMap)", "")
		}
	}
}
