package cacheconfig

import (
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Absent is the value a FieldDiff shows for an extra key one side lacks.
const Absent = "<absent>"

// ErrMismatch is matched by every *MismatchError (errors.Is).
var ErrMismatch = errors.New("cache config mismatch")

// FieldDiff is one field whose values differ; Daemon and Client are the
// canonical values (decimal integers, raw strings, Absent for a missing
// extra key).
type FieldDiff struct {
	Field  string
	Daemon string
	Client string
}

// MismatchError reports every differing field.
type MismatchError struct {
	Diffs []FieldDiff
}

// Error lists the diffs as `field: daemon="…" client="…"`, separated by "; ".
func (e *MismatchError) Error() string {
	var b strings.Builder
	b.WriteString("cache config mismatch: ")
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(d.Field)
		b.WriteString(": daemon=")
		b.WriteString(strconv.Quote(d.Daemon))
		b.WriteString(" client=")
		b.WriteString(strconv.Quote(d.Client))
	}
	return b.String()
}

// Is matches ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// Check returns a *MismatchError listing Compare(daemon, client), or nil
// when they are compatible.
func Check(daemon, client Config) error {
	if diffs := Compare(daemon, client); len(diffs) > 0 {
		return &MismatchError{Diffs: diffs}
	}
	return nil
}

// Compare returns every field on which daemon and client are incompatible,
// sorted by field name; nil means compatible. Every field must be equal,
// with these exceptions:
//   - checkpoint_digest is compared only when both sides set it; model only
//     when either side lacks it, and then after NormalizeModel. The digest
//     names the weights wherever they live; a side without one falls back to
//     the path.
//   - quantization "" and "none" are equal.
//   - extra is compared key by key; a key one side lacks differs from any
//     value, "" included, and shows as Absent.
//
// Diffs show the values as given, before normalisation.
func Compare(daemon, client Config) []FieldDiff {
	d, c := valueMap(daemon), valueMap(client)
	names := slices.Collect(maps.Keys(d))
	for n := range c {
		if _, ok := d[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	bothDigests := daemon.CheckpointDigest != "" && client.CheckpointDigest != ""
	var diffs []FieldDiff
	for _, name := range names {
		diffs = appendDiff(diffs, name, d, c, bothDigests)
	}
	return diffs
}

// appendDiff appends the diff of one field, if any.
func appendDiff(diffs []FieldDiff, name string, d, c map[string]string, bothDigests bool) []FieldDiff {
	dv, dok := d[name]
	cv, cok := c[name]
	if !dok {
		dv = Absent
	}
	if !cok {
		cv = Absent
	}
	equal := dok == cok && dv == cv
	switch name {
	case FieldCheckpointDigest:
		equal = equal || !bothDigests
	case FieldModel:
		equal = bothDigests || NormalizeModel(dv) == NormalizeModel(cv)
	case FieldQuantization:
		equal = normQuant(dv) == normQuant(cv)
	}
	if equal {
		return diffs
	}
	return append(diffs, FieldDiff{Field: name, Daemon: dv, Client: cv})
}

// valueMap maps field names to canonical values.
func valueMap(c Config) map[string]string {
	fs := c.fields()
	m := make(map[string]string, len(fs))
	for _, f := range fs {
		m[f.name] = f.value
	}
	return m
}

// normQuant maps the unquantized spellings to one.
func normQuant(q string) string {
	if q == "" {
		return "none"
	}
	return q
}

// NormalizeModel returns the form of a model path or id that Compare
// compares: "" stays ""; a URL ("scheme://…") only loses trailing slashes;
// anything else goes through filepath.Clean, which removes trailing slashes,
// "." elements and resolvable ".." elements and doubled separators (hub ids
// such as "org/name" are already clean and come out unchanged).
func NormalizeModel(model string) string {
	switch {
	case model == "":
		return ""
	case strings.Contains(model, "://"):
		if trimmed := strings.TrimRight(model, "/"); !strings.HasSuffix(trimmed, ":") {
			return trimmed
		}
		return model
	}
	return filepath.Clean(model)
}
