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
