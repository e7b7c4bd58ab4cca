// Package names holds the rules for the names a backend hands to the core
// and to clients: device UUIDs (they become file names) and handle kinds
// (they select the code that maps a handle). It is the single source of
// both rules: core/paths, core/client, the sdk's adapters and
// sdk/backendtest call it, and the Python client mirrors the handle-kind
// rule, checked against the same vectors (testdata/handle-kinds.json, read
// by names_test.go and clients/python/tests/test_mappers.py).
//
// The package imports nothing but the standard library, so that a client
// can use it without pulling in the plugin machinery of package sdk.
package names
