package cli

import (
	"testing"

	"github.com/wcache/wcache/sdk"
)

func TestHumanBytesUnitsAndParseBack(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		80 << 30: "80.0 GiB", 1<<40 - 1: "1024.0 GiB", 1 << 40: "1.0 TiB", 1<<64 - 1: "16.0 EiB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	// What it writes, sdk.ParseSize reads back within the rounding.
	for _, n := range []uint64{4096, 3 << 20, 80<<30 + 123456789, 5 << 40} {
		back, err := sdk.ParseSize(humanBytes(n))
		if err != nil {
			t.Fatalf("sdk.ParseSize(humanBytes(%d)): %v", n, err)
		}
		if diff := float64(back) - float64(n); diff > float64(n)/200 || -diff > float64(n)/200 {
			t.Errorf("sdk.ParseSize(humanBytes(%d) = %q) = %d, more than 0.5%% off", n, humanBytes(n), back)
		}
	}
}
