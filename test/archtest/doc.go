// Package archtest holds no code: its tests enforce the layering rule of
// docs/architecture.md on the module's import graph, tests included, so
// that `make test` (go test ./...) fails when an arrow points the wrong
// way:
//
//	cmd → core ∥ plugins → sdk → proto, nothing upward; test/ above all
//
// Concretely: nothing outside test/ imports test/ (what ships never
// depends on what proves it); nothing under core/ imports plugins/ or
// cmd/, and nothing under plugins/ imports core/ or cmd/; sdk/ imports
// none of them, and of internal/ only fdpass, mmap, procstat, backendrpc,
// backendplugin, childproc and grpcpipe; proto/ imports nothing of the module outside proto/;
// internal/version, internal/procstat and internal/childproc (leaves any
// layer may use) import nothing of the module. What ships imports no
// test-only package (test/, testkit/ and testdata/ folders, *test
// packages, internal/childproc and internal/grpcpipe), tests aside. Every
// Go folder of core/, sdk/ and internal/ has one line in the "Packages"
// map of docs/architecture.md, and the Python package's wcache.__all__ is
// the list its surface test checks. The modules under testdata/ (an outside vendor's plugin)
// import only sdk/. And the contract stays light: core/client and the sdk
// root package link neither hashicorp/go-plugin nor yamux (go list -deps).
// Each rule has a planted violation that must trip it. The graphs come
// from `go list`, so the go command must be on PATH.
package archtest
