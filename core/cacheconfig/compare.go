package cacheconfig

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Absent is how messages show the value of an extra key one side lacks
// (unquoted, so that it cannot be confused with the string "<absent>").
const Absent = "<absent>"

// ErrMismatch is matched by every *MismatchError (errors.Is).
var ErrMismatch = errors.New("cache config mismatch")

// FieldDiff is one field whose values differ. Daemon and Client are the
// values as given (decimal integers, raw strings). An extra key only one
// side sets is absent on the other: DaemonAbsent (ClientAbsent) is true and
// Daemon (Client) is "".
type FieldDiff struct {
	Field        string
	Daemon       string
	Client       string
	DaemonAbsent bool
	ClientAbsent bool
	// Truncated: Field, Daemon or Client was cut to MaxDiffValueBytes by
	// BoundDiffs (never by Compare).
	Truncated bool
}

// String is `field: daemon="…" client="…"`, an absent side shown as
// <absent> without quotes and a truncated diff marked " (truncated)".
func (d FieldDiff) String() string {
	side := func(v string, absent bool) string {
		if absent {
			return Absent
		}
		return strconv.Quote(v)
	}
	s := d.Field + ": daemon=" + side(d.Daemon, d.DaemonAbsent) + " client=" + side(d.Client, d.ClientAbsent)
	if d.Truncated {
		s += " (truncated)"
	}
	return s
}

// MismatchError reports the differing fields: every one from Check; from a
// daemon, those its bounded detail carries, with Omitted counting the rest.
type MismatchError struct {
	Diffs []FieldDiff
	// Omitted is the number of differing fields left out of Diffs.
	Omitted int
	// Generations is how many generations the daemon compared (0 or 1: a
	// daemon holding one); with several, Diffs are those of the nearest
	// one, Generation and ConfigDigest.
	Generations  int
	Generation   uint64
	ConfigDigest string
}

// Error lists the diffs as `field: daemon="…" client="…"`, separated by
// "; ", and ends with "; +N more" when Omitted is not zero.
func (e *MismatchError) Error() string {
	var b strings.Builder
	b.WriteString("cache config mismatch: ")
	if e.Generations > 1 {
		fmt.Fprintf(&b, "none of the daemon's %d generations matches; nearest %s: ", e.Generations, e.ConfigDigest)
	}
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(d.String())
	}
	if e.Omitted > 0 {
		if len(e.Diffs) > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "+%d more", e.Omitted)
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
//   - dtype and quantization are compared after NormalizeDType and
//     NormalizeQuantization (so "bfloat16" equals "bf16", "" equals "none").
//   - dtype "auto" (or "") on either side matches any dtype when both sides
//     set a checkpoint_digest: the daemon serves the checkpoint's bytes as
//     stored, and the digest already pins every tensor's stored dtype.
//   - extra is compared key by key; a key one side lacks differs from any
//     value, "" included, and is absent on that side of the diff.
//
// Diffs show the values as given, before normalisation. Compare is the rule
// for weights loaded from the files the digest names; ComparePublished is
// the rule for weights an engine published.
func Compare(daemon, client Config) []FieldDiff {
	return compare(daemon, client, false)
}

// ComparePublished is Compare for a generation an engine published, whose
// bytes are the engine's post-processing rather than the files the digest
// names. The digest covers the files' headers, not their values (two
// revisions of the same shapes share it), and an engine may cast, so two of
// Compare's exceptions do not hold:
//   - model is always compared, after NormalizeModel, digests or not;
//   - dtype is compared after NormalizeDType with no wildcard: "auto"
//     matches only "auto" (the dtype the publishing engine stated, resolved
//     by that engine's own rule; engine_name, engine_version and model are
//     compared too), never a dtype it does not name.
func ComparePublished(daemon, client Config) []FieldDiff {
	return compare(daemon, client, true)
}

// compare is Compare (published false) or ComparePublished. It walks the
// two configs' field lists (fields: sorted by name, each name once) side by
// side, so a field set on one side only comes out once, in name order; no
// map is built (a daemon compares on every attach, once per generation).
func compare(daemon, client Config, published bool) []FieldDiff {
	d, c := daemon.fields(), client.fields()
	bothDigests := daemon.CheckpointDigest != "" && client.CheckpointDigest != ""
	// digestPins: the digest names the bytes served (a file load), so it
	// stands for model and for every stored dtype.
	digestPins := bothDigests && !published
	var diffs []FieldDiff
	for i, j := 0, 0; i < len(d) || j < len(c); {
		switch {
		case j == len(c) || i < len(d) && d[i].name < c[j].name:
			diffs = appendDiff(diffs, d[i].name, d[i].value, "", true, false, bothDigests, digestPins)
			i++
		case i == len(d) || c[j].name < d[i].name:
			diffs = appendDiff(diffs, c[j].name, "", c[j].value, false, true, bothDigests, digestPins)
			j++
		default:
			diffs = appendDiff(diffs, d[i].name, d[i].value, c[j].value, true, true, bothDigests, digestPins)
			i++
			j++
		}
	}
	return diffs
}

// appendDiff appends the diff of one field, if any: dv and cv are its
// daemon and client values, dok and cok whether each side sets it.
func appendDiff(diffs []FieldDiff, name, dv, cv string, dok, cok, bothDigests, digestPins bool) []FieldDiff {
	equal := dok == cok && dv == cv
	switch name {
	case FieldCheckpointDigest:
		equal = equal || !bothDigests
	case FieldModel:
		equal = digestPins || NormalizeModel(dv) == NormalizeModel(cv)
	case FieldDType:
		nd, nc := NormalizeDType(dv), NormalizeDType(cv)
		equal = nd == nc || digestPins && (nd == DTypeAuto || nc == DTypeAuto)
	case FieldQuantization:
		equal = NormalizeQuantization(dv) == NormalizeQuantization(cv)
	}
	if equal {
		return diffs
	}
	return append(diffs, FieldDiff{Field: name, Daemon: dv, Client: cv, DaemonAbsent: !dok, ClientAbsent: !cok})
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
