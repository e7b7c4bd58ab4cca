package sdk

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]uint64{
		"0": 0, "4096": 4096, "8GiB": 8 << 30, "512MiB": 512 << 20, "1G": 1e9, "1g": 1e9,
		"2 KiB": 2048, "3Ki": 3072, "1.5GiB": 3 << 29, "10MB": 10e6, "7b": 7, "1TiB": 1 << 40,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "12XB", "-1", "1.2.3G", "99999999999999999999", "17000000TiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		80 << 30: "80.0 GiB", 1<<40 - 1: "1024.0 GiB", 1 << 40: "1.0 TiB", 1<<64 - 1: "16.0 EiB",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
	// What it writes, ParseSize reads back within the rounding.
	for _, n := range []uint64{4096, 3 << 20, 80<<30 + 123456789, 5 << 40} {
		back, err := ParseSize(FormatSize(n))
		if err != nil {
			t.Fatalf("ParseSize(FormatSize(%d)): %v", n, err)
		}
		if diff := float64(back) - float64(n); diff > float64(n)/200 || -diff > float64(n)/200 {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, more than 0.5%% off", n, FormatSize(n), back)
		}
	}
}
