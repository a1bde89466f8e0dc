// Package layering holds no code: its test keeps the packages to the
// layering table in docs/architecture.md. Each row there names packages and
// what they may import; the test lists every package of the module with
// `go list -deps` and fails on an import its row does not allow, or on a
// package no row names.
package layering
