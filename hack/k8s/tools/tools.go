//go:build tools

// Package tools records the commands that hack/k8s/build.sh compiles, so that
// `go mod tidy` keeps every package they need in go.mod/go.sum. The build tag
// keeps this file out of every real build (main packages cannot be imported).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
