package paths

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

const (
	nvUUID  = "GPU-ffc79498-8ff3-c2dc-3b0d-fafd804516ae"
	amdUUID = "GPU-0123456789abcdef"
)

func TestParseTemplateAcceptsCustom(t *testing.T) {
	tmpl, err := ParseTemplate(EnvSocketTemplate, "/run/wc/{device_uuid}/d-{device_uuid}.sock")
	if err != nil {
		t.Fatalf("ParseTemplate: %v", err)
	}
	got, err := tmpl.Expand(nvUUID)
	if err != nil {
		t.Fatalf("Expand: %v", err)
	}
	want := "/run/wc/" + nvUUID + "/d-" + nvUUID + ".sock"
	if got != want {
		t.Fatalf("Expand = %q, want %q", got, want)
	}
	if tmpl.String() != "/run/wc/{device_uuid}/d-{device_uuid}.sock" {
		t.Fatalf("String = %q", tmpl.String())
	}
}

func TestParseTemplateRefusals(t *testing.T) {
	cases := []struct {
		name, text string
		want       error
		mention    []string // substrings the message must contain
	}{
		{"missing", "/tmp/wcache.sock", ErrMissingPlaceholder, []string{EnvSocketTemplate, "every GPU would share one path", "rank"}},
		{"rank", "/tmp/wcache-{rank}.sock", ErrUnknownPlaceholder, []string{EnvSocketTemplate, "{rank}", "two jobs"}},
		{"rank-and-uuid", "/tmp/{device_uuid}-{rank}-{foo}.sock", ErrUnknownPlaceholder, []string{"{rank}, {foo}"}},
		{"empty-placeholder", "/tmp/{device_uuid}{}.sock", ErrUnknownPlaceholder, []string{"{}"}},
		{"case", "/tmp/{DEVICE_UUID}.sock", ErrUnknownPlaceholder, []string{"{DEVICE_UUID}"}},
		{"open", "/tmp/{device_uuid.sock", ErrUnbalancedBraces, []string{"byte 5"}},
		{"close", "/tmp/device_uuid}.sock", ErrUnbalancedBraces, []string{"byte 16"}},
		{"nested", "/tmp/{dev{device_uuid}}.sock", ErrUnbalancedBraces, []string{"'{'"}},
		{"relative", "run/{device_uuid}.sock", ErrRelativeTemplate, []string{"absolute"}},
		{"dot-relative", "./{device_uuid}.sock", ErrRelativeTemplate, nil},
		{"dotdot", "/tmp/../etc/{device_uuid}.sock", ErrUnsafeTemplate, []string{`".."`}},
		{"nul", "/tmp/\x00{device_uuid}", ErrUnsafeTemplate, []string{"control character"}},
		{"newline", "/tmp/{device_uuid}\n", ErrUnsafeTemplate, nil},
		{"empty", "", ErrEmptyTemplate, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate(EnvSocketTemplate, tc.text)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("err %T is not a *TemplateError", err)
			}
			if te.Source != EnvSocketTemplate || te.Text != tc.text {
				t.Fatalf("TemplateError{Source:%q Text:%q}", te.Source, te.Text)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestParseTemplateUnknownListed(t *testing.T) {
	_, err := ParseTemplate(FlagReadyTemplate, "/x/{rank}/{device_uuid}/{foo}")
	var te *TemplateError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v", err)
	}
	if strings.Join(te.Unknown, ",") != "{rank},{foo}" {
		t.Fatalf("Unknown = %q", te.Unknown)
	}
	if !strings.HasPrefix(err.Error(), FlagReadyTemplate+"=") {
		t.Fatalf("message %q does not start with the flag name", err)
	}
}

func TestExpandValidatesUUID(t *testing.T) {
	tmpl := MustParseTemplate("test", "/tmp/{device_uuid}.sock")
	for _, bad := range []string{"", "../x", "/", "a/b", "x\x00y", "..", "GPU 1", "gpu_1", "é", strings.Repeat("a", MaxDeviceUUIDLen+1)} {
		p, err := tmpl.Expand(bad)
		if !errors.Is(err, ErrInvalidUUID) {
			t.Errorf("Expand(%q) = %q, %v; want ErrInvalidUUID", bad, p, err)
		}
		var ue *InvalidUUIDError
		if !errors.As(err, &ue) || ue.UUID != bad {
			t.Errorf("Expand(%q): err %v is not an *InvalidUUIDError carrying the UUID", bad, err)
		}
	}
	for _, good := range []string{nvUUID, amdUUID, "MIG-ffc79498-8ff3-c2dc-3b0d-fafd804516ae", "0", strings.Repeat("a", MaxDeviceUUIDLen)} {
		if _, err := tmpl.Expand(good); err != nil {
			t.Errorf("Expand(%q): %v", good, err)
		}
	}
}

func TestZeroTemplateRefused(t *testing.T) {
	var tmpl Template
	if !tmpl.IsZero() {
		t.Fatal("zero Template not IsZero")
	}
	if _, err := tmpl.Expand(nvUUID); !errors.Is(err, ErrEmptyTemplate) {
		t.Fatalf("Expand on zero Template: %v", err)
	}
}

// TestGlobEscapeMatchesOnlyItself: every metacharacter of filepath.Match
// is escaped, so the glob matches the literal name and nothing the
// unescaped pattern would.
func TestGlobEscapeMatchesOnlyItself(t *testing.T) {
	for _, name := range []string{"plain", "a*b", "q?", "w[1]", `back\slash`, ".tmp-x*?[\\"} {
		g := GlobEscape(name)
		if ok, err := filepath.Match(g, name); err != nil || !ok {
			t.Errorf("GlobEscape(%q) = %q does not match it: %v %v", name, g, ok, err)
		}
	}
	// What each name matches as an unescaped pattern, but must not escaped.
	for name, other := range map[string]string{"a*b": "aXb", "q?": "qZ", "w[1]": "w1"} {
		if ok, _ := filepath.Match(GlobEscape(name), other); ok {
			t.Errorf("GlobEscape(%q) matches %q", name, other)
		}
	}
}

func TestReadyGlobEscapesLiterals(t *testing.T) {
	l := Layout{
		Socket: MustParseTemplate("s", "/w[1]/{device_uuid}.sock"),
		Ready:  MustParseTemplate("r", "/w[1]/{device_uuid}.ready.json"),
	}
	if g := l.ReadyGlob(); g != `/w\[1]/*.ready.json` {
		t.Fatalf("ReadyGlob = %q", g)
	}
	ok, err := filepath.Match(l.ReadyGlob(), "/w[1]/"+nvUUID+".ready.json")
	if err != nil || !ok {
		t.Fatalf("glob does not match its own ready file: %v %v", ok, err)
	}
}
