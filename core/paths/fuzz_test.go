package paths

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseTemplate checks the parser's invariants on arbitrary input: it
// never panics, and an accepted template expands every valid UUID to an
// absolute path that contains the UUID, contains no "..", differs between
// UUIDs, and round-trips through String.
func FuzzParseTemplate(f *testing.F) {
	for _, seed := range []string{
		"/tmp/{device_uuid}.sock",
		"/run/user/1000/wcache/{device_uuid}.ready.json",
		"/a/{device_uuid}/{device_uuid}",
		"/a/{device_uuid}{device_uuid}",
		"/tmp/wcache.sock",
		"/tmp/{rank}.sock",
		"/tmp/{device_uuid",
		"/tmp/}{device_uuid}",
		"/tmp/{{device_uuid}}",
		"/tmp/{}",
		"tmp/{device_uuid}",
		"/tmp/../{device_uuid}",
		"/tmp/.{device_uuid}.",
		"/tmp/\x00{device_uuid}",
		"/w[1]/*{device_uuid}?",
		"",
		"{device_uuid}",
		"/{device_uuid}",
	} {
		f.Add(seed)
	}
	uuids := []string{"GPU-ffc79498-8ff3-c2dc-3b0d-fafd804516ae", "GPU-0123456789abcdef", "a", "A-1"}
	f.Fuzz(func(t *testing.T, text string) {
		tmpl, err := ParseTemplate("fuzz", text)
		if err != nil {
			if tmpl.String() != "" || !tmpl.IsZero() {
				t.Fatalf("refused template returned a non-zero Template %q", tmpl.String())
			}
			return
		}
		if tmpl.String() != text {
			t.Fatalf("String() = %q, want %q", tmpl.String(), text)
		}
		seen := map[string]string{}
		for _, u := range uuids {
			p, err := tmpl.Expand(u)
			if err != nil {
				t.Fatalf("accepted template %q: Expand(%q): %v", text, u, err)
			}
			if !filepath.IsAbs(p) {
				t.Fatalf("template %q expands %q to relative %q", text, u, p)
			}
			if !strings.Contains(p, u) {
				t.Fatalf("template %q expands %q to %q without the UUID", text, u, p)
			}
			if strings.Contains(p, "..") {
				t.Fatalf("template %q expands %q to %q containing ..", text, u, p)
			}
			if prev, dup := seen[p]; dup {
				t.Fatalf("template %q expands %q and %q to the same %q", text, prev, u, p)
			}
			seen[p] = u
		}
		if _, err := tmpl.Expand("../x"); err == nil {
			t.Fatalf("template %q expanded an invalid UUID", text)
		}
	})
}
