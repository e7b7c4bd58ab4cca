package bench

import _ "embed"

// DocsTemplate is the text/template docs/benchmarks.md is rendered from
// (test/benchdocs, `wcache-bench render`). Its prose is written by hand:
// whoever changes a figure's measurement keeps the note on what limits it
// current.
//
//go:embed benchmarks.md.tmpl
var DocsTemplate string
