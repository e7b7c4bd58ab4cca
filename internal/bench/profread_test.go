package bench

import (
	"strings"
	"testing"
)

// A -focus'd fill profile as pprofTop prints it.
const fillTop = `# by own time (flat)
Duration: 3.51s, Total samples = 4.80s (136.75%)
Active filters:
   focus=mockbackend\.\(\*Backend\)\.copyChunks
      flat  flat%   sum%        cum   cum%
     4.70s 97.92% 97.92%      4.70s 97.92%  internal/runtime/syscall/linux.Syscall6

# by cumulative time (cum)
Duration: 3.51s, Total samples = 4.80s (136.75%)
Active filters:
   focus=mockbackend\.\(\*Backend\)\.copyChunks
      flat  flat%   sum%        cum   cum%
         0     0%     0%      4.78s 99.58%  github.com/wcache/wcache/plugins/mock/mockbackend.(*Backend).copyChunks.func2
     0.01s  0.21%  0.21%      4.77s 99.38%  github.com/wcache/wcache/plugins/mock/mockbackend.copyChunk
         0     0%  0.21%      3.30s 68.75%  github.com/wcache/wcache/plugins/mock/mockbackend.writeChunk
         0     0%  0.21%      3.30s 68.75%  golang.org/x/sys/unix.Pwrite (inline)
         0     0%  0.21%      1.45s 30.21%  github.com/wcache/wcache/plugins/mock/mockbackend.readChunk
`

func TestParsePprofTop(t *testing.T) {
	rows := parsePprofTop(fillTop)
	if len(rows[pprofFlatTitle]) != 1 || len(rows[pprofCumTitle]) != 5 {
		t.Fatalf("rows: %+v", rows)
	}
	if r := rows[pprofCumTitle][3]; r.Name != "golang.org/x/sys/unix.Pwrite" || r.Cum != 68.75 {
		t.Errorf("row %+v", r)
	}
	if got := cumOf(rows[pprofCumTitle], "mockbackend.copyChunk"); got != 99.38 {
		t.Errorf("cumOf copyChunk = %v (copyChunks.func2 must not match)", got)
	}
	if got := cumOf(rows[pprofCumTitle], "absent"); got != 0 {
		t.Errorf("cumOf absent = %v", got)
	}
}

func TestFillProfileReadingSplitsReadAndWrite(t *testing.T) {
	got := profileReading("fill", fillTop)
	for _, want := range []string{"69.18% are in writeChunk", "30.4% in readChunk", "the write into fresh shared memory takes most",
		"0.42% is left"} {
		if !strings.Contains(got, want) {
			t.Errorf("reading lacks %q:\n%s", want, got)
		}
	}
	// Without the read and write frames there is nothing to say.
	if got := profileReading("fill", "# by cumulative time (cum)\n 0 0% 0% 1s 100% main.main\n"); got != "" {
		t.Errorf("reading of an unrelated profile: %q", got)
	}
	if got := profileReading(keyStartup, fillTop); !strings.Contains(got, "linux.Syscall6 with 97.92% of all samples") {
		t.Errorf("start-up reading: %q", got)
	}
}
