package safetensors

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// decodeHeaderFast decodes a header the way decodeHeader does, for the
// headers writers produce: valid JSON without a backslash, integers written
// as plain digits. It reports false for anything else, and for every header
// decodeHeader refuses, without saying why: decodeHeader then decodes it
// (and names the problem). Its answers on the headers it takes are
// decodeHeader's (TestFastDecodeAgreesWithDecodeHeader).
//
// decodeHeaderTokens walks encoding/json's token stream, which costs ~4 µs
// per tensor: every scalar token is a Decode of its own (reflection, and a
// SyntaxError built and dropped at the value's end); on that walk, parsing
// a checkpoint's headers is the largest part of `wcache attach`'s process
// and of a daemon's plan. Here json.Valid checks the syntax in one pass and
// a walk over the then well-formed bytes reads the values without
// allocating more than the result (BenchmarkParseHeader: ~5x faster).
func decodeHeaderFast(raw []byte) ([]TensorInfo, map[string]string, bool) {
	// No backslash: strings are their raw bytes (no escapes to decode, and
	// no \u escape for checkSurrogates to refuse).
	if bytes.IndexByte(raw, '\\') >= 0 || !json.Valid(raw) {
		return nil, nil, false
	}
	p := &jsonWalk{b: raw}
	var (
		tensors  []TensorInfo
		metadata map[string]string
		seen     = make(map[string]struct{})
	)
	ok := p.object(func(key string) bool {
		if _, dup := seen[key]; dup {
			return false
		}
		seen[key] = struct{}{}
		var ok bool
		if key == metadataKey {
			metadata, ok = p.metadata()
			return ok
		}
		t, ok := p.tensor(key)
		tensors = append(tensors, t)
		return ok
	})
	if !ok {
		return nil, nil, false
	}
	return tensors, metadata, true
}

// jsonWalk reads values out of JSON that json.Valid accepted and that holds
// no backslash. Its methods report false for what decodeHeader would
// refuse, or what they do not handle.
type jsonWalk struct {
	b []byte
	i int
}

// skipSpace moves past JSON whitespace.
func (p *jsonWalk) skipSpace() {
	for p.i < len(p.b) && isJSONSpace(p.b[p.i]) {
		p.i++
	}
}

// consume moves past c (after whitespace) when it is next.
func (p *jsonWalk) consume(c byte) bool {
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string: its raw bytes, there being no escapes.
func (p *jsonWalk) str() (string, bool) {
	if !p.consume('"') {
		return "", false
	}
	end := bytes.IndexByte(p.b[p.i:], '"')
	if end < 0 {
		return "", false
	}
	s := string(p.b[p.i : p.i+end])
	p.i += end + 1
	return s, true
}

// object reads an object: '{', each member's key and ':', whose value
// member reads, and '}'. It reports false when member does.
func (p *jsonWalk) object(member func(key string) bool) bool {
	if !p.consume('{') {
		return false
	}
	for first := true; !p.consume('}'); first = false {
		if !first && !p.consume(',') {
			return false
		}
		k, ok := p.str()
		if !ok || !p.consume(':') || !member(k) {
			return false
		}
	}
	return true
}

// metadata reads the value of "__metadata__": null, or an object of
// strings with distinct keys.
func (p *jsonWalk) metadata() (map[string]string, bool) {
	p.skipSpace()
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += len("null")
		return nil, true
	}
	m := make(map[string]string)
	ok := p.object(func(k string) bool {
		if _, dup := m[k]; dup {
			return false
		}
		var ok bool
		m[k], ok = p.str()
		return ok
	})
	return m, ok
}

// tensor reads one entry as decodeTensor does: dtype, shape and
// data_offsets once each; other fields skipped (once each).
func (p *jsonWalk) tensor(name string) (TensorInfo, bool) {
	t := TensorInfo{Name: name}
	var hasDType, hasShape, hasOffsets bool
	var others map[string]struct{}
	ok := p.object(func(field string) bool {
		var ok bool
		switch field {
		case "dtype":
			if hasDType {
				return false
			}
			hasDType = true
			s, ok := p.str()
			if !ok {
				return false
			}
			var err error
			t.DType, err = ParseDType(s)
			return err == nil
		case "shape":
			if hasShape {
				return false
			}
			hasShape = true
			t.Shape, ok = p.uints(-1)
			return ok
		case "data_offsets":
			if hasOffsets {
				return false
			}
			hasOffsets = true
			offsets, ok := p.uints(2)
			if ok {
				t.Begin, t.End = offsets[0], offsets[1]
			}
			return ok
		}
		if others == nil {
			others = make(map[string]struct{})
		}
		if _, dup := others[field]; dup {
			return false
		}
		others[field] = struct{}{}
		return p.skip(fieldDepth)
	})
	return t, ok && hasDType && hasShape && hasOffsets
}

// uints reads an array of integers written as plain digits that fit in a
// u64, of want elements (-1: any number; [] is an empty, non-nil slice).
func (p *jsonWalk) uints(want int) ([]uint64, bool) {
	if !p.consume('[') {
		return nil, false
	}
	out := []uint64{}
	for first := true; !p.consume(']'); first = false {
		if !first && !p.consume(',') {
			return nil, false
		}
		p.skipSpace()
		start := p.i
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
		}
		v, err := strconv.ParseUint(string(p.b[start:p.i]), 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
	}
	return out, want < 0 || len(out) == want
}

// skip moves past one value at nesting depth at (see MaxNestingDepth),
// refusing one nested deeper than MaxNestingDepth as skipValue does.
func (p *jsonWalk) skip(at int) bool {
	_, ok := p.value(at, true)
	return ok
}

// value moves past one value and returns its bytes. With limit, the value
// sits at nesting depth at and may not nest deeper than MaxNestingDepth
// (skipValue's rule); without, any depth json.Valid took is accepted.
func (p *jsonWalk) value(at int, limit bool) ([]byte, bool) {
	p.skipSpace()
	start := p.i
	depth := 0
	for {
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, false
		}
		switch c := p.b[p.i]; c {
		case '{', '[':
			depth++
			if limit && at+depth-1 > MaxNestingDepth {
				return nil, false
			}
			p.i++
		case '}', ']':
			depth--
			p.i++
		case ',', ':':
			p.i++
		case '"':
			if _, ok := p.str(); !ok {
				return nil, false
			}
		default: // a number, true, false or null: up to the next delimiter
			for p.i < len(p.b) && !isJSONSpace(p.b[p.i]) && strings.IndexByte(",:]}", p.b[p.i]) < 0 {
				p.i++
			}
		}
		if depth == 0 {
			return p.b[start:p.i], true
		}
	}
}

// parseIndexFast parses an index document as ParseIndex does, for the
// documents writers produce (valid JSON without a backslash): the weight
// map, the raw "metadata" value, other top-level keys skipped. It reports
// false for anything else, and for every document ParseIndex refuses:
// ParseIndex's token walk then names the problem. Same reason as
// decodeHeaderFast: the token walk cost ~1.5 µs per weight.
func parseIndexFast(data []byte) (*Index, bool) {
	if bytes.IndexByte(data, '\\') >= 0 || !json.Valid(data) {
		return nil, false
	}
	p := &jsonWalk{b: data}
	ix := &Index{}
	seen := make(map[string]bool)
	ok := p.object(func(key string) bool {
		if seen[key] {
			return false
		}
		seen[key] = true
		switch key {
		case "weight_map":
			m := make(map[string]string)
			ix.WeightMap = m
			return p.object(func(name string) bool {
				if _, dup := m[name]; dup {
					return false
				}
				shard, ok := p.str()
				m[name] = shard
				return ok && plainFileName(shard)
			})
		case "metadata":
			raw, ok := p.value(0, false)
			ix.Metadata = append(json.RawMessage(nil), raw...)
			return ok
		}
		return p.skip(2) // the index object is level 1
	})
	if !ok || ix.WeightMap == nil {
		return nil, false
	}
	return ix, true
}
