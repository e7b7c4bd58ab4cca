package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// abuseSeeds are the known hostile shapes of safetensors files (the
// reference's attacks/ directory and friends), plus valid files.
func abuseSeeds(tb testing.TB) [][]byte {
	raw := safetensorstest.RawFile
	var many strings.Builder // many tensors aliasing one range [0, n]
	many.WriteString("{")
	for i := range 64 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(entry("t"+itoa(i), "F32", "[256]", 0, 1024))
	}
	many.WriteString("}")
	var valid bytes.Buffer
	err := safetensorstest.Encode(&valid, []safetensorstest.Tensor{
		{Name: "a", DType: safetensors.F32, Shape: []uint64{2, 2}, Data: make([]byte, 16)},
		{Name: "b", DType: safetensors.BF16, Shape: []uint64{3}, Data: make([]byte, 6)},
		{Name: "c", DType: safetensors.F4, Shape: []uint64{2}, Data: make([]byte, 1)},
	}, map[string]string{"format": "pt"})
	if err != nil {
		tb.Fatal(err)
	}
	return [][]byte{
		valid.Bytes(),
		raw(`{}`, nil),
		raw(`{`+entry("a", "U8", "[4]", 0, 4)+`,`+entry("b", "U8", "[4]", 2, 6)+`}`, make([]byte, 6)), // overlap
		raw(many.String(), make([]byte, 1024)),                                                        // aliases
		withLength(1<<20, []byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`)),           // length past EOF
		withLength(^uint64(0)-3, []byte(`{}`)),                                                        // huge length
		raw(`{`+entry("a", "U8", "[2]", 0, 2)+`}`, make([]byte, 3)),                                   // trailing bytes
		raw(`{`+entry("a", "U8", "[2]", 0, 2)+`,`+entry("a", "U8", "[2]", 2, 4)+`}`, make([]byte, 4)), // duplicate
		raw(`{`+entry("a", "U8", "[-2]", 0, 2)+`}`, make([]byte, 2)),                                  // negative shape
		raw(`{`+entry("a", "U8", "[2]", 0, 2)+`,`+entry("b", "U8", "[2]", 4, 6)+`}`, make([]byte, 6)), // hole
		raw(`{`+entry("a", "Q4", "[2]", 0, 2)+`}`, make([]byte, 2)),                                   // unknown dtype
		raw(`{"__metadata__":{"k":1}}`, nil),
		raw(`{`+entry("a", "U8", "[4294967296,4294967296]", 0, 0)+`}`, nil),
		raw(`{"a\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil),
	}
}

func FuzzParseHeader(f *testing.F) {
	for _, s := range abuseSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		h, rawHeader, err := parseBytes(file)
		if err != nil {
			var fe *safetensors.FormatError
			if !errors.As(err, &fe) || fe.Err == nil {
				t.Fatalf("error is not a *FormatError with a sentinel: %v", err)
			}
			if h != nil || rawHeader != nil {
				t.Fatal("header returned with an error")
			}
			return
		}
		checkAccepted(t, file, h, rawHeader)
	})
}

// checkAccepted re-checks every rule on a header ParseHeader accepted.
func checkAccepted(t *testing.T, file []byte, h *safetensors.Header, rawHeader []byte) {
	t.Helper()
	if len(file) < 8 {
		t.Fatalf("accepted a %d-byte file", len(file))
	}
	n := binary.LittleEndian.Uint64(file)
	if n > safetensors.MaxHeaderSize || n != h.Size || uint64(len(rawHeader)) != n || 8+n > uint64(len(file)) {
		t.Fatalf("accepted header length %d (Size %d, raw %d, file %d)", n, h.Size, len(rawHeader), len(file))
	}
	if !bytes.Equal(rawHeader, file[8:8+n]) {
		t.Fatal("raw header differs from the file bytes")
	}
	if !utf8.Valid(rawHeader) || rawHeader[0] != '{' {
		t.Fatalf("accepted a header that is not UTF-8 starting with '{': %q", rawHeader)
	}
	seen := make(map[string]bool)
	var end uint64
	for _, ti := range h.Tensors {
		if seen[ti.Name] || ti.Name == "__metadata__" {
			t.Fatalf("accepted duplicate or reserved name %q", ti.Name)
		}
		seen[ti.Name] = true
		if !ti.DType.Valid() {
			t.Fatalf("accepted dtype %q", ti.DType)
		}
		if ti.Begin != end || ti.End < ti.Begin {
			t.Fatalf("accepted %q at [%d, %d] after end %d", ti.Name, ti.Begin, ti.End, end)
		}
		size, err := safetensors.ByteSize(ti.DType, ti.Shape)
		if err != nil || size != ti.End-ti.Begin {
			t.Fatalf("accepted %q with %d bytes for %s %v (%d, %v)", ti.Name, ti.End-ti.Begin, ti.DType, ti.Shape, size, err)
		}
		end = ti.End
	}
	if end+8+n != uint64(len(file)) {
		t.Fatalf("accepted data end %d + 8 + %d for a %d-byte file", end, n, len(file))
	}
	if h.DataSize() != end {
		t.Fatalf("DataSize() = %d, want %d", h.DataSize(), end)
	}
}

func TestAbuseSeedsRejected(t *testing.T) {
	for i, s := range abuseSeeds(t)[2:] {
		if _, _, err := parseBytes(s); err == nil {
			t.Errorf("abuse seed %d accepted", i+2)
		}
	}
	for i, s := range abuseSeeds(t)[:2] {
		h, rawHeader, err := parseBytes(s)
		if err != nil {
			t.Fatalf("valid seed %d: %v", i, err)
		}
		checkAccepted(t, s, h, rawHeader)
	}
}

func TestFuzzCorpusFiles(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseHeader")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 10 {
		t.Fatalf("seed corpus has %d files", len(entries))
	}
	for _, e := range entries {
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		body, ok := strings.CutPrefix(string(text), "go test fuzz v1\n[]byte(")
		body, ok2 := strings.CutSuffix(body, ")\n")
		file, err := strconv.Unquote(body)
		if !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a one-[]byte corpus file", e.Name())
		}
		h, rawHeader, err := parseBytes([]byte(file))
		if strings.HasPrefix(e.Name(), "valid-") {
			if err != nil {
				t.Errorf("%s: %v", e.Name(), err)
				continue
			}
			checkAccepted(t, []byte(file), h, rawHeader)
		} else if err == nil {
			t.Errorf("%s: accepted", e.Name())
		}
	}
}
