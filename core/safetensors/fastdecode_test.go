package safetensors

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// fastDecodeSeeds are headers around every rule decodeHeaderFast must
// either follow or leave to decodeHeaderTokens.
func fastDecodeSeeds() []string {
	var many strings.Builder
	many.WriteString(`{"__metadata__":{"format":"pt","total":"7"}`)
	for i := range 300 {
		fmt.Fprintf(&many, `,"model.layers.%d.mlp.up_proj.weight":{"dtype":"BF16","shape":[%d,4096],"data_offsets":[%d,%d]}`,
			i, 11008+i, i*8, i*8+8)
	}
	many.WriteString("}")
	deep := `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":` + strings.Repeat("[", 130) + strings.Repeat("]", 130) + `}}`
	shallow := `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":` + strings.Repeat("[", 125) + strings.Repeat("]", 125) + `}}`
	return []string{
		many.String(),
		`{}`, `{ }`, "{}  \t\r\n", `{"__metadata__":null}`, `{"__metadata__":{}}`,
		`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`,
		` {"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`,
		`{ "a" : { "shape" : [ 2 ] , "dtype" : "U8" , "data_offsets" : [ 0 , 2 ] } }`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":{"k":[1,2.5,-3,true,null,"s"]},"more":"x"}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":1,"extra":2}}`,
		deep, shallow,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`,
		`{"__metadata__":{"k":"v"},"__metadata__":null}`,
		`{"__metadata__":{"k":"v","k":"w"}}`, `{"__metadata__":{"k":1}}`, `{"__metadata__":[]}`, `{"__metadata__":"x"}`,
		`{"a":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[2e1],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":2,"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0]}}`,
		`{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":7,"shape":[2],"data_offsets":[0,2]}}`,
		`{"a":{"shape":[2],"data_offsets":[0,2]}}`, `{"a":{"dtype":"U8","data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[2]}}`,
		`{"a":{"dtype":"U8","dtype":"U8","shape":[2],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[2],"shape":[2],"data_offsets":[0,2]}}`,
		`{"a":[]}`, `{"a":null}`, `[]`, `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}} x`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}`, `{"a\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`,
		`{"a\"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, `{"a\u0062":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`,
		`{"é":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, "{\"a\x01\":{}}", "{\"\xff\":1}",
	}
}

// TestFastDecodeAgreesWithDecodeHeader: on every seed, and each seed cut
// short at every length, decodeHeaderFast either leaves the header to
// decodeHeaderTokens or returns exactly what it returns; and it never takes
// a header decodeHeaderTokens refuses.
func TestFastDecodeAgreesWithDecodeHeader(t *testing.T) {
	took := 0
	for _, s := range fastDecodeSeeds() {
		for n := len(s); n >= 0; n-- {
			if n < len(s) && len(s) > 400 && n%97 != 0 {
				continue // the long seed: a sample of its prefixes
			}
			if checkFastDecode(t, []byte(s[:n])) && n == len(s) {
				took++
			}
		}
	}
	if took < 8 {
		t.Errorf("decodeHeaderFast took only %d seeds whole: the fast path is not exercised", took)
	}
}

func FuzzFastDecode(f *testing.F) {
	for _, s := range fastDecodeSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkFastDecode(t, raw) })
}

// checkFastDecode compares the two decoders on raw (past decodeHeader's
// UTF-8 and '{' checks, which come first) and reports whether the fast one
// took it.
func checkFastDecode(t *testing.T, raw []byte) bool {
	t.Helper()
	if !utf8.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
		return false
	}
	ft, fm, ok := decodeHeaderFast(raw)
	st, sm, err := decodeHeaderTokens(raw)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("%q: decodeHeaderFast takes it, decodeHeaderTokens refuses it: %v", raw, err)
	}
	if !reflect.DeepEqual(ft, st) || !reflect.DeepEqual(fm, sm) {
		t.Fatalf("%q: decodeHeaderFast = %#v, %#v; decodeHeaderTokens = %#v, %#v", raw, ft, fm, st, sm)
	}
	return true
}
