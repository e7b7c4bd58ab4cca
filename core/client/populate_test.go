package client

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk/names"
)

// rssOf is the Rss in bytes of this process's mapping that starts at data.
func rssOf(t *testing.T, data []byte) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(unsafe.SliceData(data))))
	inside := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		switch {
		case len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			inside = strings.HasPrefix(fields[0], start)
		case inside && len(fields) >= 2 && fields[0] == "Rss:":
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}

// TestMappersPopulatePerMode: the memfd mapper maps every page of the
// handle before the caller reads any (sync; async once Release waited for
// it), or none (off), and the bytes are the memfd's; an unknown mode is an
// error naming the variable.
func TestMappersPopulatePerMode(t *testing.T) {
	const size = 8 << 20
	fd, err := unix.MemfdCreate("wcache-populate-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(i)
	}
	if _, err := f.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	h := Handle{Kind: names.KindMemfd, Size: size, File: f}
	probe, err := MapFile(f, size)
	if err != nil {
		t.Fatal(err)
	}
	supported := populateRead(probe[:4096]) == nil
	_ = Unmap(probe)
	for _, mode := range []Populate{PopulateSync, PopulateAsync, PopulateOff} {
		t.Run(string(mode), func(t *testing.T) {
			t.Setenv(PopulateEnv, string(mode))
			m, err := mapMemfdHandle(h)
			if err != nil {
				t.Fatal(err)
			}
			rss := rssOf(t, m.Data)
			// Async: the mapper's goroutine maps them meanwhile (bounded
			// wait, nothing read here).
			for i := 0; mode == PopulateAsync && supported && rss != size && i < 1000; i++ {
				time.Sleep(10 * time.Millisecond)
				rss = rssOf(t, m.Data)
			}
			switch {
			case mode == PopulateOff && rss != 0:
				t.Errorf("off: %d bytes resident before any read", rss)
			case mode != PopulateOff && supported && rss != size:
				t.Errorf("%s: %d of %d bytes resident", mode, rss, size)
			}
			if m.Data[size-1] != p[size-1] || m.Data[12345] != p[12345] {
				t.Error("the mapping's bytes are not the memfd's")
			}
			if err := m.Release(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Setenv(PopulateEnv, "")
	if mode, err := PopulateFromEnv(); mode != PopulateOff || err != nil {
		t.Fatalf("PopulateFromEnv with %s unset = %q, %v; want off", PopulateEnv, mode, err)
	}
	t.Setenv(PopulateEnv, "eager")
	if _, err := mapMemfdHandle(h); err == nil || !strings.Contains(err.Error(), PopulateEnv) {
		t.Fatalf("mapMemfdHandle with %s=eager: %v, want an error naming it", PopulateEnv, err)
	}
}
