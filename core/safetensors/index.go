package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// IndexFileName is the name of the index of a sharded checkpoint.
const IndexFileName = "model.safetensors.index.json"

// MaxIndexSize is the largest index file accepted (100 MB, like headers).
const MaxIndexSize = 100_000_000

// Index is a parsed model.safetensors.index.json:
// {"metadata": {...}, "weight_map": {"<tensor>": "<shard file name>"}}.
type Index struct {
	// Path is the file it was read from (empty for ParseIndex).
	Path string
	// Metadata is the raw "metadata" value (any JSON); nil when absent.
	Metadata json.RawMessage
	// WeightMap maps each weight to the base name of its shard.
	WeightMap map[string]string
}

// Shards returns the distinct shard names of the weight map, sorted.
func (ix *Index) Shards() []string {
	shards := make([]string, 0, 8)
	for _, s := range ix.WeightMap {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	return slices.Compact(shards)
}

// ReadIndex reads and parses the index file at path (see ParseIndex). A file
// larger than MaxIndexSize is refused with ErrInvalidIndex.
func ReadIndex(path string) (*Index, error) {
	f, _, err := openRegular(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxIndexSize+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: read %s: %w", path, err)
	}
	if len(data) > MaxIndexSize {
		return nil, &FormatError{Path: path, Rule: fmt.Sprintf("index is larger than %d bytes", MaxIndexSize), Err: ErrInvalidIndex}
	}
	ix, err := ParseIndex(data)
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
		}
		return nil, err
	}
	ix.Path = path
	return ix, nil
}

// ParseIndex parses an index document. It must be a JSON object with a
// "weight_map" object of string values; other top-level keys are kept
// ("metadata") or ignored. A repeated key in the top-level object or in the
// weight map is ErrDuplicateName (Python's json keeps the last silently; a
// checkpoint that says two things about one weight is refused). Every shard
// name must be a plain file name — not empty, ".", "..", nor containing '/',
// '\\' or NUL — else ErrInvalidIndex: an index must not reach outside its
// directory. Documents in the form writers produce take parseIndexFast,
// which gives the same answers without the token walk's cost.
func ParseIndex(data []byte) (*Index, error) {
	if !utf8.Valid(data) {
		return nil, &FormatError{Rule: "index is not valid UTF-8", Err: ErrInvalidIndex}
	}
	if ix, ok := parseIndexFast(data); ok {
		return ix, nil
	}
	return parseIndexTokens(data)
}

// parseIndexTokens is ParseIndex on encoding/json's token stream, for the
// documents parseIndexFast does not take: it names what is wrong.
func parseIndexTokens(data []byte) (*Index, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	bad := func(rule string) error { return &FormatError{Rule: rule, Err: ErrInvalidIndex} }
	syntax := func(err error) error { return bad("index is not a valid JSON object: " + err.Error()) }
	tok, err := dec.Token()
	if err != nil {
		return nil, syntax(err)
	}
	if tok != json.Delim('{') {
		return nil, bad(fmt.Sprintf("index must be a JSON object, got %s", describe(tok)))
	}
	ix := &Index{}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntax(err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, &FormatError{Tensor: key, Rule: "key appears more than once in the index", Err: ErrDuplicateName}
		}
		seen[key] = true
		switch key {
		case "weight_map":
			if ix.WeightMap, err = decodeWeightMap(dec); err != nil {
				return nil, err
			}
		case "metadata":
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, syntax(err)
			}
			ix.Metadata = raw
		default:
			if err := skipValue(dec, 2); err != nil { // the index object is level 1
				return nil, syntax(err)
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntax(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("unexpected data after the index object")
	}
	if ix.WeightMap == nil {
		return nil, bad("index has no weight_map object")
	}
	return ix, nil
}

// decodeWeightMap decodes the weight_map object.
func decodeWeightMap(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, &FormatError{Rule: "weight_map: " + err.Error(), Err: ErrInvalidIndex}
	}
	if tok != json.Delim('{') {
		return nil, &FormatError{Rule: fmt.Sprintf("weight_map must be an object, got %s", describe(tok)), Err: ErrInvalidIndex}
	}
	m := make(map[string]string)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, &FormatError{Rule: "weight_map: " + err.Error(), Err: ErrInvalidIndex}
		}
		name, _ := tok.(string)
		if _, dup := m[name]; dup {
			return nil, &FormatError{Tensor: name, Rule: "weight appears more than once in weight_map", Err: ErrDuplicateName}
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, &FormatError{Tensor: name, Rule: "weight_map: " + err.Error(), Err: ErrInvalidIndex}
		}
		shard, ok := tok.(string)
		if !ok {
			return nil, &FormatError{Tensor: name, Rule: fmt.Sprintf("shard must be a string, got %s", describe(tok)), Err: ErrInvalidIndex}
		}
		if !plainFileName(shard) {
			return nil, &FormatError{Tensor: name, Rule: fmt.Sprintf("shard %q is not a plain file name in the checkpoint directory", shard), Err: ErrInvalidIndex}
		}
		m[name] = shard
	}
	if _, err := dec.Token(); err != nil {
		return nil, &FormatError{Rule: "weight_map: " + err.Error(), Err: ErrInvalidIndex}
	}
	return m, nil
}

// plainFileName reports whether name names an entry of a directory itself:
// no separator, no parent reference, no NUL.
func plainFileName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00")
}
