// Package lab is sandprobe's network lab: network namespaces joined by veth
// pairs to a router that holds an nftables "CNI", a resolver, a filtering
// forward proxy, allowed hosts, live must-fail targets and switchable broken
// states (hack/lab/README.md). It also holds the lab's own servers: the HTTP
// and HTTPS listener every target is, and the DNS "authority" that stands in
// for the internet's DNS, plus the small clients the lab's selftest uses.
//
// Nothing here sends a packet outside loopback and the lab's namespaces.
package lab
