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
	agreeOnSeeds(t, fastDecodeSeeds(), checkFastDecode, 8)
}

// agreeOnSeeds runs check on every seed and on each seed cut short at
// every length (a sample of the long ones' lengths), and fails unless the
// fast path took at least `least` of the seeds whole.
func agreeOnSeeds(t *testing.T, seeds []string, check func(*testing.T, []byte) bool, least int) {
	t.Helper()
	took := 0
	for _, s := range seeds {
		for n := len(s); n >= 0; n-- {
			if n < len(s) && len(s) > 400 && n%97 != 0 {
				continue // a long seed: a sample of its prefixes
			}
			if check(t, []byte(s[:n])) && n == len(s) {
				took++
			}
		}
	}
	if took < least {
		t.Errorf("the fast path took only %d seeds whole: it is not exercised", took)
	}
}

func FuzzFastDecode(f *testing.F) { fuzzAgreement(f, fastDecodeSeeds(), checkFastDecode) }

// fuzzAgreement fuzzes check from seeds.
func fuzzAgreement(f *testing.F, seeds []string, check func(*testing.T, []byte) bool) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { check(t, b) })
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

// indexSeeds are index documents around every rule parseIndexFast must
// either follow or leave to parseIndexTokens.
func indexSeeds() []string {
	var many strings.Builder
	many.WriteString(`{"metadata": {"total_size": 65882112}, "weight_map": {`)
	for i := range 300 {
		if i > 0 {
			many.WriteString(", ")
		}
		fmt.Fprintf(&many, "\n    \"model.layers.%d.self_attn.q_proj.weight\": \"model-%05d-of-00002.safetensors\"", i, 1+i%2)
	}
	many.WriteString("\n  }\n}\n")
	return []string{
		many.String(),
		`{"weight_map":{}}`, `{"weight_map":{"a":"s.safetensors"}}`, `{"metadata":null,"weight_map":{}}`,
		`{"metadata":{"a":[1,{"b":2.5e3}],"c":"d"},"weight_map":{"a":"s"},"other":[1,[2,[3]]]}`,
		`{"metadata": [ 1 , 2 ] ,"weight_map":{"a":"s"}}`, `{"weight_map":{"a":"s"},"metadata":"x"}`,
		`{"x":` + strings.Repeat("[", 126) + strings.Repeat("]", 126) + `,"weight_map":{}}`,
		`{"x":` + strings.Repeat("[", 127) + strings.Repeat("]", 127) + `,"weight_map":{}}`,
		`{"metadata":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `,"weight_map":{}}`,
		`{}`, `{"metadata":{}}`, `[]`, `{"weight_map":[]}`, `{"weight_map":null}`,
		`{"weight_map":{"a":"s","a":"s"}}`, `{"weight_map":{},"weight_map":{}}`, `{"metadata":1,"metadata":1,"weight_map":{}}`,
		`{"weight_map":{"a":1}}`, `{"weight_map":{"a":""}}`, `{"weight_map":{"a":"."}}`, `{"weight_map":{"a":".."}}`,
		`{"weight_map":{"a":"d/s"}}`, `{"weight_map":{"a":"d\\s"}}`, `{"weight_map":{"a":"s\u0000"}}`,
		`{"weight_map":{"a\"":"s"}}`, `{"weight_map":{"a":"s"}} {}`, `{"weight_map":{"a":"s"}} `,
	}
}

// TestFastIndexAgreesWithParseIndex: as TestFastDecodeAgreesWithDecodeHeader,
// for parseIndexFast and ParseIndex's token walk.
func TestFastIndexAgreesWithParseIndex(t *testing.T) {
	agreeOnSeeds(t, indexSeeds(), checkFastIndex, 6)
}

func FuzzFastIndex(f *testing.F) { fuzzAgreement(f, indexSeeds(), checkFastIndex) }

// checkFastIndex compares the two index parsers on data (past ParseIndex's
// UTF-8 check) and reports whether the fast one took it.
func checkFastIndex(t *testing.T, data []byte) bool {
	t.Helper()
	if !utf8.Valid(data) {
		return false
	}
	fast, ok := parseIndexFast(data)
	slow, err := parseIndexTokens(data)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("%q: parseIndexFast takes it, the token walk refuses it: %v", data, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: parseIndexFast = %#v; the token walk = %#v", data, fast, slow)
	}
	return true
}
