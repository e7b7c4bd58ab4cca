// Package tools pins the developer tools wcache's Makefile runs (staticcheck,
// benchstat) in a module of their own, so that they never become dependencies
// of the product. Run them with `go tool -modfile=tools/go.mod NAME`.
package tools
