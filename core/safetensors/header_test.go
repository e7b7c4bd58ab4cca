package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// parseBytes runs ParseHeader over an in-memory file.
func parseBytes(b []byte) (*safetensors.Header, []byte, error) {
	return safetensors.ParseHeader(bytes.NewReader(b), int64(len(b)))
}

// withLength returns an 8-byte prefix claiming n header bytes, then rest.
func withLength(n uint64, rest []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, n)
	return append(out, rest...)
}

// entry formats one tensor entry.
func entry(name, dtype, shape string, begin, end int) string {
	return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":[` +
		itoa(begin) + `,` + itoa(end) + `]}`
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func TestParseHeaderRejects(t *testing.T) {
	raw := safetensorstest.RawFile
	data := func(n int) []byte { return make([]byte, n) }
	cases := []struct {
		name string
		file []byte
		want error
	}{
		{"empty file", nil, safetensors.ErrHeaderTooSmall},
		{"7 bytes", make([]byte, 7), safetensors.ErrHeaderTooSmall},
		{"huge header length", withLength(safetensors.MaxHeaderSize+1, []byte("{}")), safetensors.ErrHeaderTooLarge},
		{"max u64 header length", withLength(^uint64(0), []byte("{}")), safetensors.ErrHeaderTooLarge},
		{"header length past EOF", withLength(100, []byte(`{"a":1}`)), safetensors.ErrInvalidHeaderLength},
		{"header length one past EOF", withLength(3, []byte("{}")), safetensors.ErrInvalidHeaderLength},
		{"empty header", raw("", nil), safetensors.ErrInvalidHeader},
		{"invalid UTF-8", raw("{\"a\xff\":{}}", nil), safetensors.ErrInvalidHeader},
		{"leading space", raw(" {}", nil), safetensors.ErrInvalidHeader},
		{"array", raw("[]", nil), safetensors.ErrInvalidHeader},
		{"truncated JSON", raw(`{"a":`, nil), safetensors.ErrInvalidHeader},
		{"garbage after object", raw(`{}x`, nil), safetensors.ErrInvalidHeader},
		{"second object", raw(`{}{}`, nil), safetensors.ErrInvalidHeader},
		{"entry not object", raw(`{"a":[1]}`, nil), safetensors.ErrInvalidHeader},
		{"negative shape", raw(`{`+entry("a", "U8", "[-1]", 0, 0)+`}`, nil), safetensors.ErrInvalidHeader},
		{"negative zero shape", raw(`{`+entry("a", "U8", "[-0]", 0, 0)+`}`, nil), safetensors.ErrInvalidHeader},
		{"float shape", raw(`{`+entry("a", "U8", "[2.0]", 0, 2)+`}`, data(2)), safetensors.ErrInvalidHeader},
		{"exponent shape", raw(`{`+entry("a", "U8", "[2e0]", 0, 2)+`}`, data(2)), safetensors.ErrInvalidHeader},
		{"string shape", raw(`{`+entry("a", "U8", `["2"]`, 0, 2)+`}`, data(2)), safetensors.ErrInvalidHeader},
		{"null shape element", raw(`{`+entry("a", "U8", `[null]`, 0, 2)+`}`, data(2)), safetensors.ErrInvalidHeader},
		{"shape not array", raw(`{`+entry("a", "U8", `2`, 0, 2)+`}`, data(2)), safetensors.ErrInvalidHeader},
		{"shape past u64", raw(`{`+entry("a", "U8", "[18446744073709551616]", 0, 2)+`}`, data(2)), safetensors.ErrInvalidHeader},
		{"one offset", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[2]}}`, data(2)), safetensors.ErrInvalidHeader},
		{"three offsets", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2,2]}}`, data(2)), safetensors.ErrInvalidHeader},
		{"negative offset", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[-2,0]}}`, data(2)), safetensors.ErrInvalidHeader},
		{"missing dtype", raw(`{"a":{"shape":[2],"data_offsets":[0,2]}}`, data(2)), safetensors.ErrInvalidHeader},
		{"missing shape", raw(`{"a":{"dtype":"U8","data_offsets":[0,2]}}`, data(2)), safetensors.ErrInvalidHeader},
		{"missing offsets", raw(`{"a":{"dtype":"U8","shape":[2]}}`, data(2)), safetensors.ErrInvalidHeader},
		{"dtype not string", raw(`{"a":{"dtype":8,"shape":[2],"data_offsets":[0,2]}}`, data(2)), safetensors.ErrInvalidHeader},
		{"unknown dtype", raw(`{`+entry("a", "F128", "[2]", 0, 2)+`}`, data(2)), safetensors.ErrUnknownDType},
		{"lowercase dtype", raw(`{`+entry("a", "u8", "[2]", 0, 2)+`}`, data(2)), safetensors.ErrUnknownDType},
		{"metadata not object", raw(`{"__metadata__":[]}`, nil), safetensors.ErrInvalidHeader},
		{"metadata number value", raw(`{"__metadata__":{"k":1}}`, nil), safetensors.ErrInvalidHeader},
		{"metadata nested value", raw(`{"__metadata__":{"k":{"x":"y"}}}`, nil), safetensors.ErrInvalidHeader},
		{"duplicate tensor names", raw(`{`+entry("a", "U8", "[2]", 0, 2)+`,`+entry("a", "U8", "[2]", 2, 4)+`}`, data(4)), safetensors.ErrDuplicateName},
		{"duplicate field", raw(`{"a":{"dtype":"U8","dtype":"I8","shape":[2],"data_offsets":[0,2]}}`, data(2)), safetensors.ErrDuplicateName},
		{"duplicate unknown field", raw(`{"a":{"x":1,"x":2,"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, data(2)), safetensors.ErrDuplicateName},
		{"duplicate metadata", raw(`{"__metadata__":{},"__metadata__":{}}`, nil), safetensors.ErrDuplicateName},
		{"duplicate metadata key", raw(`{"__metadata__":{"k":"a","k":"b"}}`, nil), safetensors.ErrDuplicateName},
		{"first not at 0", raw(`{`+entry("a", "U8", "[2]", 2, 4)+`}`, data(4)), safetensors.ErrInvalidOffset},
		{"overlap", raw(`{`+entry("a", "U8", "[4]", 0, 4)+`,`+entry("b", "U8", "[4]", 2, 6)+`}`, data(6)), safetensors.ErrInvalidOffset},
		{"alias", raw(`{`+entry("a", "U8", "[4]", 0, 4)+`,`+entry("b", "U8", "[4]", 0, 4)+`}`, data(4)), safetensors.ErrInvalidOffset},
		{"hole", raw(`{`+entry("a", "U8", "[4]", 0, 4)+`,`+entry("b", "U8", "[4]", 6, 10)+`}`, data(10)), safetensors.ErrInvalidOffset},
		{"end before begin", raw(`{`+entry("a", "U8", "[0]", 0, 0)+`,`+entry("b", "U8", "[0]", 4, 2)+`}`, data(4)), safetensors.ErrInvalidOffset},
		{"element overflow", raw(`{`+entry("a", "U8", "[4294967296,4294967296]", 0, 0)+`}`, nil), safetensors.ErrOverflow},
		{"bit overflow", raw(`{`+entry("a", "F32", "[18446744073709551615]", 0, 0)+`}`, nil), safetensors.ErrOverflow},
		{"misaligned F4", raw(`{`+entry("a", "F4", "[3]", 0, 2)+`}`, data(2)), safetensors.ErrMisaligned},
		{"misaligned F6", raw(`{`+entry("a", "F6_E3M2", "[1]", 0, 1)+`}`, data(1)), safetensors.ErrMisaligned},
		{"range too short", raw(`{`+entry("a", "F32", "[2]", 0, 4)+`}`, data(4)), safetensors.ErrTensorInvalidInfo},
		{"range too long", raw(`{`+entry("a", "BF16", "[2]", 0, 8)+`}`, data(8)), safetensors.ErrTensorInvalidInfo},
		{"trailing bytes", raw(`{`+entry("a", "U8", "[2]", 0, 2)+`}`, data(3)), safetensors.ErrIncompleteBuffer},
		{"missing bytes", raw(`{`+entry("a", "U8", "[2]", 0, 2)+`}`, data(1)), safetensors.ErrIncompleteBuffer},
		{"trailing bytes after empty header", raw(`{}`, data(1)), safetensors.ErrIncompleteBuffer},
		{"lone high surrogate", raw(`{"a\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), safetensors.ErrInvalidHeader},
		{"lone low surrogate", raw(`{"__metadata__":{"k":"\udc00"}}`, nil), safetensors.ErrInvalidHeader},
		{"reversed surrogates", raw(`{"__metadata__":{"k":"\udc00\ud800"}}`, nil), safetensors.ErrInvalidHeader},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, rawHeader, err := parseBytes(tc.file)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if h != nil || rawHeader != nil {
				t.Fatalf("got a header with error %v", err)
			}
			var fe *safetensors.FormatError
			if !errors.As(err, &fe) || fe.Err != tc.want || fe.Rule == "" {
				t.Fatalf("err = %#v, want a *FormatError with Err %v and a Rule", err, tc.want)
			}
		})
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	raw := safetensorstest.RawFile
	cases := []struct {
		name    string
		file    []byte
		tensors []safetensors.TensorInfo
		meta    map[string]string
	}{
		{"empty object", raw(`{}`, nil), nil, nil},
		{"space padding", raw(`{}      `, nil), nil, nil},
		{"JSON whitespace inside and after", raw("{ \n\t\"a\" : {\"dtype\":\"U8\",\"shape\":[ 1 ],\"data_offsets\":[0,1]}\r\n }\n ", []byte{7}),
			[]safetensors.TensorInfo{{Name: "a", DType: "U8", Shape: []uint64{1}, Begin: 0, End: 1}}, nil},
		{"unknown fields ignored", raw(`{"a":{"x":{"y":[1,{"z":null}],"w":"v"},"dtype":"U8","shape":[2],"data_offsets":[0,2],"q":true}}`, []byte{1, 2}),
			[]safetensors.TensorInfo{{Name: "a", DType: "U8", Shape: []uint64{2}, Begin: 0, End: 2}}, nil},
		{"metadata null", raw(`{"__metadata__":null}`, nil), nil, nil},
		{"metadata strings", raw(`{"__metadata__":{"format":"pt","":"\u00e9\ud83d\ude00"}}`, nil), nil,
			map[string]string{"format": "pt", "": "é😀"}},
		{"scalar and empty tensors, sorted by offset", raw(`{`+entry("s", "F32", "[]", 2, 6)+`,`+entry("e2", "U8", "[0,5]", 6, 6)+`,`+
			entry("e1", "F16", "[3,0]", 0, 0)+`,`+entry("b", "U8", "[2]", 0, 2)+`}`, make([]byte, 6)),
			[]safetensors.TensorInfo{
				{Name: "e1", DType: "F16", Shape: []uint64{3, 0}, Begin: 0, End: 0},
				{Name: "b", DType: "U8", Shape: []uint64{2}, Begin: 0, End: 2},
				{Name: "s", DType: "F32", Shape: []uint64{}, Begin: 2, End: 6},
				{Name: "e2", DType: "U8", Shape: []uint64{0, 5}, Begin: 6, End: 6},
			}, nil},
		{"sub-byte dtypes", raw(`{`+entry("f4", "F4", "[2,3]", 0, 3)+`,`+entry("f6", "F6_E2M3", "[4]", 3, 6)+`,`+
			entry("c", "C64", "[1]", 6, 14)+`,`+entry("z", "F8_E5M2FNUZ", "[1]", 14, 15)+`}`, make([]byte, 15)),
			[]safetensors.TensorInfo{
				{Name: "f4", DType: "F4", Shape: []uint64{2, 3}, Begin: 0, End: 3},
				{Name: "f6", DType: "F6_E2M3", Shape: []uint64{4}, Begin: 3, End: 6},
				{Name: "c", DType: "C64", Shape: []uint64{1}, Begin: 6, End: 14},
				{Name: "z", DType: "F8_E5M2FNUZ", Shape: []uint64{1}, Begin: 14, End: 15},
			}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, rawHeader, err := parseBytes(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			n := binary.LittleEndian.Uint64(tc.file)
			if h.Size != n || !bytes.Equal(rawHeader, tc.file[8:8+n]) {
				t.Fatalf("Size %d raw %q, want %d %q", h.Size, rawHeader, n, tc.file[8:8+n])
			}
			if len(h.Tensors) != len(tc.tensors) {
				t.Fatalf("tensors = %+v, want %+v", h.Tensors, tc.tensors)
			}
			for i, got := range h.Tensors {
				want := tc.tensors[i]
				if got.Name != want.Name || got.DType != want.DType || got.Begin != want.Begin || got.End != want.End ||
					shapeStr(got.Shape) != shapeStr(want.Shape) || (got.Shape == nil) != (want.Shape == nil) {
					t.Fatalf("tensor %d = %+v, want %+v", i, got, want)
				}
			}
			if len(h.Metadata) != len(tc.meta) || (tc.meta == nil) != (h.Metadata == nil) {
				t.Fatalf("metadata = %#v, want %#v", h.Metadata, tc.meta)
			}
			for k, v := range tc.meta {
				if h.Metadata[k] != v {
					t.Fatalf("metadata[%q] = %q, want %q", k, h.Metadata[k], v)
				}
			}
		})
	}
}

func shapeStr(s []uint64) string {
	var b strings.Builder
	for _, d := range s {
		b.WriteString(itoa(int(d)))
		b.WriteByte(',')
	}
	return b.String()
}

// recordingReader is an io.ReaderAt that remembers the furthest byte read.
type recordingReader struct {
	r   *bytes.Reader
	max int64
}

func (rr *recordingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := rr.r.ReadAt(p, off)
	rr.max = max(rr.max, off+int64(n))
	return n, err
}

func TestParseHeaderReadsNoTensorBytes(t *testing.T) {
	var buf bytes.Buffer
	err := safetensorstest.Encode(&buf, []safetensorstest.Tensor{
		{Name: "w", DType: safetensors.F32, Shape: []uint64{256}, Data: make([]byte, 1024)},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	rr := &recordingReader{r: bytes.NewReader(buf.Bytes())}
	h, _, err := safetensors.ParseHeader(rr, int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(8 + h.Size); rr.max != want {
		t.Fatalf("read up to byte %d, want exactly the %d header bytes", rr.max, want)
	}
}

func TestParseHeaderDoesNotTrustLength(t *testing.T) {
	// A header claiming MaxHeaderSize bytes in a tiny file must be refused
	// before a buffer of that size exists.
	file := withLength(safetensors.MaxHeaderSize, []byte("{}"))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := parseBytes(file)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, safetensors.ErrInvalidHeaderLength) {
		t.Fatalf("err = %v, want ErrInvalidHeaderLength", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a lying header length", grew)
	}
}

func TestParseHeaderShortReader(t *testing.T) {
	// The caller claims a larger file than the reader holds: an I/O error,
	// not a format verdict.
	file := safetensorstest.RawFile(`{}`, nil)
	_, _, err := safetensors.ParseHeader(bytes.NewReader(file[:9]), int64(len(file)))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestFormatErrorMessage(t *testing.T) {
	file := safetensorstest.RawFile(`{`+entry("a", "U8", "[4]", 0, 4)+`,`+entry("b", "U8", "[4]", 2, 6)+`}`, make([]byte, 6))
	_, _, err := parseBytes(file)
	want := `safetensors: tensor "b": data_offsets [2, 6] overlap the previous tensor "a", which ends at 4 (invalid offset)`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

func TestByteSize(t *testing.T) {
	cases := []struct {
		d     safetensors.DType
		shape []uint64
		want  uint64
		err   error
	}{
		{safetensors.BF16, []uint64{4096, 4096}, 32 << 20, nil},
		{safetensors.F32, nil, 4, nil},
		{safetensors.F4, []uint64{2}, 1, nil},
		{safetensors.F4, []uint64{1}, 0, safetensors.ErrMisaligned},
		{safetensors.F6E3M2, []uint64{4}, 3, nil},
		{safetensors.C64, []uint64{3}, 24, nil},
		{safetensors.U8, []uint64{1 << 32, 1 << 32}, 0, safetensors.ErrOverflow},
		{safetensors.U64, []uint64{1 << 58}, 0, safetensors.ErrOverflow}, // bits overflow, bytes would not
		{safetensors.U64, []uint64{1 << 57}, 1 << 60, nil},
		{safetensors.U8, []uint64{0, 1 << 63, 1 << 63}, 0, nil},
		{"X", []uint64{1}, 0, safetensors.ErrUnknownDType},
	}
	for _, tc := range cases {
		got, err := safetensors.ByteSize(tc.d, tc.shape)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("ByteSize(%s, %v) = %d, %v; want %d, %v", tc.d, tc.shape, got, err, tc.want, tc.err)
		}
	}
}

// nested is an entry whose unknown field "x" nests arrays so that the
// deepest one sits at depth levels, the header object counting as 1.
func nested(depth int) []byte {
	n := depth - 2 // the header object and the entry
	h := `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":` +
		strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`
	return safetensorstest.RawFile(h, []byte{1})
}

func TestParseHeaderNestingDepth(t *testing.T) {
	if _, _, err := parseBytes(nested(safetensors.MaxNestingDepth)); err != nil {
		t.Fatalf("%d levels (what the reference accepts): %v", safetensors.MaxNestingDepth, err)
	}
	_, _, err := parseBytes(nested(safetensors.MaxNestingDepth + 1))
	if !errors.Is(err, safetensors.ErrInvalidHeader) || !strings.Contains(err.Error(), "nesting") {
		t.Fatalf("%d levels: err = %v, want ErrInvalidHeader about nesting", safetensors.MaxNestingDepth+1, err)
	}

	// 5M levels: valid JSON that encoding/json would walk to the end,
	// growing a 5M-entry stack. The cap stops at the first level too many.
	deep := nested(5_000_000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err = parseBytes(deep)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, safetensors.ErrInvalidHeader) || !strings.Contains(err.Error(), "nesting") {
		t.Fatalf("5M levels: err = %v, want ErrInvalidHeader about nesting", err)
	}
	// The header buffer itself is 10 MB; the parse must not add a
	// per-level cost on top of it.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 3*uint64(len(deep)) {
		t.Errorf("5M levels: parsing allocated %d bytes for a %d-byte file", grew, len(deep))
	}
}

// TestTruncatedFileSuggestsIncompleteDownload: a file shorter than its
// header says is most often a download that stopped; the rule says so, and
// says how many bytes are missing. A file that is too long does not.
func TestTruncatedFileSuggestsIncompleteDownload(t *testing.T) {
	raw := safetensorstest.RawFile
	data := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"missing data", raw(`{`+entry("a", "U8", "[8]", 0, 8)+`}`, data(5)), "3 bytes short: an incomplete download"},
		{"header cut", withLength(100, []byte(`{"a":1}`)), "an incomplete download"},
	} {
		if _, _, err := parseBytes(tc.file); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to say %q", tc.name, err, tc.want)
		}
	}
	_, _, err := parseBytes(raw(`{`+entry("a", "U8", "[2]", 0, 2)+`}`, data(3)))
	if err == nil || strings.Contains(err.Error(), "download") {
		t.Errorf("trailing bytes: err = %v, want no download hint", err)
	}
}
