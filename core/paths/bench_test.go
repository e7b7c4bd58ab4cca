package paths

import (
	"testing"

	"github.com/wcache/wcache/core/paths/pathstest"
)

// BenchmarkLayoutFor measures path derivation for custom templates (pure
// string work) and for the default directory (which adds an lstat).
func BenchmarkLayoutFor(b *testing.B) {
	b.Run("custom", func(b *testing.B) {
		l := Layout{
			Socket: MustParseTemplate("s", "/run/wcache/{device_uuid}.sock"),
			Ready:  MustParseTemplate("r", "/run/wcache/{device_uuid}.ready.json"),
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.For(nvUUID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("default-dir", func(b *testing.B) {
		xdg := pathstest.ShortDir(b)
		l, err := NewLayout(Options{Getenv: func(k string) string {
			if k == "XDG_RUNTIME_DIR" {
				return xdg
			}
			return ""
		}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.For(nvUUID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
