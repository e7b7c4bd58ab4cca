// Package archtest holds no code: its test enforces the layering rule of
// docs/architecture.md on the module's import graph, tests included, so
// that `make test` (go test ./...) fails when an arrow points the wrong
// way:
//
//	cmd → cmd/wcache/cli → core ∥ plugins → sdk → proto, nothing upward
//
// Concretely: no package under core/, sdk/ or plugins/ imports internal/;
// nothing under core/ imports plugins/, and nothing under plugins/ imports
// core/; sdk/ imports neither; proto/ imports nothing of the module outside
// proto/; version/ and procstat/ (leaves any layer may use) import nothing
// of the module. The graph comes from
// `go list -test`, so the go command must be on PATH.
package archtest
