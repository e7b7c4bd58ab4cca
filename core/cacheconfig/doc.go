// Package cacheconfig is the CacheConfig domain type: the identity of the
// weights a daemon holds and a client expects, its validation, its canonical
// encoding and digest (reproducible in any language), the field-by-field
// compatibility check, and the checkpoint digest over safetensors headers.
//
// docs/cacheconfig.md describes the fields, defaults, compatibility rules and
// both encodings; testdata/vectors.json holds vectors shared with the Python
// client.
package cacheconfig
