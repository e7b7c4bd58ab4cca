package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// metadataKey is the reserved top-level key of the string→string metadata.
const metadataKey = "__metadata__"

// MaxNestingDepth is the deepest JSON nesting a header may have, the
// top-level object counting as 1. The reference reader's serde_json stops at
// its recursion limit of 128 (a 128th level is an error), so 127 levels are
// accepted and no valid file is refused; deeper input is ErrInvalidHeader
// after reading at most 128 opening brackets, however deep it goes.
const MaxNestingDepth = 127

// fieldDepth is the nesting depth of a tensor entry's field values: the
// header object (1) holds the entry (2), whose values start at 3.
const fieldDepth = 3

// decodeHeader decodes the raw header JSON strictly. It walks encoding/json's
// token stream instead of unmarshalling into maps, because a map silently
// keeps the last of two equal keys; here a repeated key at any level the
// reader interprets is ErrDuplicateName. Headers in the form writers produce
// take decodeHeaderFast, which gives the same answers without the token
// stream's cost.
func decodeHeader(raw []byte) ([]TensorInfo, map[string]string, error) {
	if !utf8.Valid(raw) {
		return nil, nil, formatErr(ErrInvalidHeader, "", "header is not valid UTF-8")
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, nil, formatErr(ErrInvalidHeader, "", "header does not start with '{'")
	}
	if tensors, metadata, ok := decodeHeaderFast(raw); ok {
		return tensors, metadata, nil
	}
	return decodeHeaderTokens(raw)
}

// decodeHeaderTokens is decodeHeader on encoding/json's token stream, for
// the headers decodeHeaderFast does not take: it names what is wrong.
func decodeHeaderTokens(raw []byte) ([]TensorInfo, map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the '{' checked above
		return nil, nil, jsonErr("", err)
	}
	var (
		tensors  []TensorInfo
		metadata map[string]string
		seen     = make(map[string]struct{})
	)
	for dec.More() {
		key, err := objectKey(dec, "")
		if err != nil {
			return nil, nil, err
		}
		if _, dup := seen[key]; dup {
			return nil, nil, formatErr(ErrDuplicateName, key, "key appears more than once in the header")
		}
		seen[key] = struct{}{}
		if key == metadataKey {
			if metadata, err = decodeMetadata(dec); err != nil {
				return nil, nil, err
			}
			continue
		}
		t, err := decodeTensor(dec, key)
		if err != nil {
			return nil, nil, err
		}
		tensors = append(tensors, t)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, nil, jsonErr("", err)
	}
	for _, c := range raw[dec.InputOffset():] {
		if !isJSONSpace(c) {
			return nil, nil, formatErr(ErrInvalidHeader, "",
				fmt.Sprintf("unexpected %q after the JSON object (only space padding may follow it)", c))
		}
	}
	if err := checkSurrogates(raw); err != nil {
		return nil, nil, err
	}
	return tensors, metadata, nil
}

// decodeMetadata decodes the value of "__metadata__": null, or an object
// whose values are all strings.
func decodeMetadata(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(metadataKey, err)
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, formatErr(ErrInvalidHeader, metadataKey,
			fmt.Sprintf("must be an object of strings, got %s", describe(tok)))
	}
	m := make(map[string]string)
	for dec.More() {
		key, err := objectKey(dec, metadataKey)
		if err != nil {
			return nil, err
		}
		if _, dup := m[key]; dup {
			return nil, formatErr(ErrDuplicateName, metadataKey, fmt.Sprintf("key %q appears more than once", key))
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(metadataKey, err)
		}
		s, ok := tok.(string)
		if !ok {
			return nil, formatErr(ErrInvalidHeader, metadataKey,
				fmt.Sprintf("value of %q must be a string, got %s", key, describe(tok)))
		}
		m[key] = s
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonErr(metadataKey, err)
	}
	return m, nil
}

// decodeTensor decodes one tensor entry: dtype, shape and data_offsets are
// required and strictly typed; other fields are skipped, as the reference
// (no deny_unknown_fields) does, but no field may appear twice.
func decodeTensor(dec *json.Decoder, name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	tok, err := dec.Token()
	if err != nil {
		return t, jsonErr(name, err)
	}
	if tok != json.Delim('{') {
		return t, formatErr(ErrInvalidHeader, name, fmt.Sprintf("entry must be an object, got %s", describe(tok)))
	}
	var hasDType, hasShape, hasOffsets bool
	var others map[string]struct{}
	for dec.More() {
		field, err := objectKey(dec, name)
		if err != nil {
			return t, err
		}
		dup := false
		switch field {
		case "dtype":
			dup, hasDType = hasDType, true
		case "shape":
			dup, hasShape = hasShape, true
		case "data_offsets":
			dup, hasOffsets = hasOffsets, true
		default:
			if others == nil {
				others = make(map[string]struct{})
			}
			_, dup = others[field]
			others[field] = struct{}{}
		}
		if dup {
			return t, formatErr(ErrDuplicateName, name, fmt.Sprintf("field %q appears more than once", field))
		}
		switch field {
		case "dtype":
			tok, err := dec.Token()
			if err != nil {
				return t, jsonErr(name, err)
			}
			s, ok := tok.(string)
			if !ok {
				return t, formatErr(ErrInvalidHeader, name, fmt.Sprintf("dtype must be a string, got %s", describe(tok)))
			}
			if t.DType, err = ParseDType(s); err != nil {
				return t, formatErr(ErrUnknownDType, name, fmt.Sprintf("dtype %q is not a safetensors dtype", s))
			}
		case "shape":
			if t.Shape, err = decodeUints(dec, name, "shape", -1); err != nil {
				return t, err
			}
		case "data_offsets":
			offsets, err := decodeUints(dec, name, "data_offsets", 2)
			if err != nil {
				return t, err
			}
			t.Begin, t.End = offsets[0], offsets[1]
		default:
			if err := skipValue(dec, fieldDepth); err != nil {
				return t, jsonErr(name, err)
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return t, jsonErr(name, err)
	}
	switch {
	case !hasDType:
		return t, formatErr(ErrInvalidHeader, name, "missing field dtype")
	case !hasShape:
		return t, formatErr(ErrInvalidHeader, name, "missing field shape")
	case !hasOffsets:
		return t, formatErr(ErrInvalidHeader, name, "missing field data_offsets")
	}
	return t, nil
}

// decodeUints decodes an array of non-negative integers that fit in a u64.
// want is the required length, or -1 for any length. Negative numbers,
// fractions, exponents and non-numbers are ErrInvalidHeader.
func decodeUints(dec *json.Decoder, tensor, field string, want int) ([]uint64, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(tensor, err)
	}
	if tok != json.Delim('[') {
		return nil, formatErr(ErrInvalidHeader, tensor, fmt.Sprintf("%s must be an array of integers, got %s", field, describe(tok)))
	}
	out := []uint64{} // a rank-0 shape is [], not absent
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(tensor, err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, formatErr(ErrInvalidHeader, tensor,
				fmt.Sprintf("%s[%d] must be a non-negative integer, got %s", field, len(out), describe(tok)))
		}
		v, err := strconv.ParseUint(string(num), 10, 64)
		if err != nil {
			return nil, formatErr(ErrInvalidHeader, tensor,
				fmt.Sprintf("%s[%d] = %s is not an integer in [0, 2^64)", field, len(out), num))
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonErr(tensor, err)
	}
	if want >= 0 && len(out) != want {
		return nil, formatErr(ErrInvalidHeader, tensor, fmt.Sprintf("%s must have exactly %d elements, got %d", field, want, len(out)))
	}
	return out, nil
}

// objectKey reads the next token, which the decoder guarantees is a key.
func objectKey(dec *json.Decoder, tensor string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", jsonErr(tensor, err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", formatErr(ErrInvalidHeader, tensor, fmt.Sprintf("expected an object key, got %s", describe(tok)))
	}
	return key, nil
}

// skipValue consumes one JSON value of any kind, nested ones included. The
// value sits at nesting depth at (see MaxNestingDepth); nesting deeper than
// MaxNestingDepth is an error.
func skipValue(dec *json.Decoder, at int) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
				if at+depth-1 > MaxNestingDepth {
					return fmt.Errorf("JSON nesting deeper than %d levels", MaxNestingDepth)
				}
			default:
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// checkSurrogates refuses \u escapes of unpaired UTF-16 surrogates, which
// encoding/json silently turns into U+FFFD while the reference's serde_json
// rejects them. raw is syntactically valid JSON when this runs, so every
// backslash is inside a string.
func checkSurrogates(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			return formatErr(ErrInvalidHeader, "", "malformed \\u escape")
		}
		i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return formatErr(ErrInvalidHeader, "", fmt.Sprintf("unpaired UTF-16 surrogate \\u%04x", r))
		case r >= 0xD800 && r <= 0xDBFF:
			if i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return formatErr(ErrInvalidHeader, "", fmt.Sprintf("unpaired UTF-16 surrogate \\u%04x", r))
			}
			lo, ok := hex4(raw, i+3)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return formatErr(ErrInvalidHeader, "", fmt.Sprintf("unpaired UTF-16 surrogate \\u%04x", r))
			}
			i += 6
		}
	}
	return nil
}

// hex4 parses the four hex digits at raw[at:at+4].
func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw[at:at+4]), 16, 16)
	return rune(v), err == nil
}

// isJSONSpace reports whether c is JSON whitespace. The writer pads with
// spaces; serde_json, which the reference uses, accepts any JSON whitespace
// after the value, and so does this reader.
func isJSONSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// jsonErr reports a JSON syntax error.
func jsonErr(tensor string, err error) *FormatError {
	return formatErr(ErrInvalidHeader, tensor, "header is not a valid JSON object: "+err.Error())
}

// describe names a JSON token for an error message.
func describe(tok any) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", string(v))
	case string:
		return "the string " + strconv.Quote(v)
	case json.Number:
		return "the number " + string(v)
	case bool:
		return strconv.FormatBool(v)
	}
	return fmt.Sprintf("%v", tok)
}
