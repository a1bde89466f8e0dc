//go:build tools

// Package tools records the etcd main package that hack/k8s/build.sh
// compiles, so `go mod tidy` keeps its dependencies in go.mod/go.sum.
package tools

import _ "go.etcd.io/etcd/server/v3"
