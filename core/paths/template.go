package paths

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// DeviceUUIDPlaceholder is the only placeholder a path template may contain.
const DeviceUUIDPlaceholder = "{device_uuid}"

// Sentinel errors matched by errors.Is on a *TemplateError.
var (
	// ErrEmptyTemplate: the template is the empty string.
	ErrEmptyTemplate = errors.New("empty template")
	// ErrMissingPlaceholder: the template has no {device_uuid}.
	ErrMissingPlaceholder = errors.New("template lacks " + DeviceUUIDPlaceholder)
	// ErrUnknownPlaceholder: the template has a {name} other than {device_uuid}.
	ErrUnknownPlaceholder = errors.New("unknown placeholder in template")
	// ErrUnbalancedBraces: a '{' without its '}', a '}' without its '{', or nested braces.
	ErrUnbalancedBraces = errors.New("unbalanced braces in template")
	// ErrRelativeTemplate: the template is not an absolute path.
	ErrRelativeTemplate = errors.New("template is not an absolute path")
	// ErrUnsafeTemplate: the template contains ".." or a control character.
	ErrUnsafeTemplate = errors.New("unsafe template")
)

// TemplateError reports a path template that was refused. Source names where
// the template came from (an environment variable such as
// WCACHE_SOCKET_TEMPLATE, or a flag such as --socket-template), so the user
// knows what to fix.
type TemplateError struct {
	Source  string   // variable or flag the template came from
	Text    string   // the template as given
	Unknown []string // the unknown placeholders, for ErrUnknownPlaceholder
	Detail  string   // human explanation
	Err     error    // one of the sentinel errors above
}

func (e *TemplateError) Error() string {
	return fmt.Sprintf("%s=%s: %s", e.Source, quoteTruncated(e.Text, 200), e.Detail)
}

// Unwrap returns the sentinel describing the kind of failure.
func (e *TemplateError) Unwrap() error { return e.Err }

// Template is a parsed path template: literal text around one or more
// {device_uuid} placeholders. The zero Template is invalid; Expand refuses it.
type Template struct {
	text  string
	parts []string // literal pieces; the UUID goes between consecutive pieces
}

// ParseTemplate parses a path template. source names the variable or flag the
// text came from and appears in every error.
//
// Rules: the text is an absolute path; it contains {device_uuid} at least
// once; braces appear only as part of a placeholder, and {device_uuid} is the
// only placeholder (there is no escape for literal braces); it contains no
// ".." and no control characters. Violations are a *TemplateError wrapping
// ErrEmptyTemplate, ErrMissingPlaceholder, ErrUnknownPlaceholder,
// ErrUnbalancedBraces, ErrRelativeTemplate or ErrUnsafeTemplate.
func ParseTemplate(source, text string) (Template, error) {
	fail := func(sentinel error, detail string, unknown []string) (Template, error) {
		return Template{}, &TemplateError{Source: source, Text: text, Unknown: unknown, Detail: detail, Err: sentinel}
	}
	if text == "" {
		return fail(ErrEmptyTemplate, "the template is empty", nil)
	}
	for i := 0; i < len(text); i++ {
		if c := text[i]; c < 0x20 || c == 0x7f {
			return fail(ErrUnsafeTemplate, fmt.Sprintf("control character %q at byte %d", c, i), nil)
		}
	}

	var (
		parts   []string
		unknown []string
		lit     strings.Builder
	)
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '}':
			return fail(ErrUnbalancedBraces, fmt.Sprintf("'}' at byte %d has no matching '{'", i), nil)
		case '{':
			end := strings.IndexAny(text[i+1:], "{}")
			if end < 0 || text[i+1+end] == '{' {
				return fail(ErrUnbalancedBraces, fmt.Sprintf("'{' at byte %d has no matching '}'", i), nil)
			}
			name := text[i : i+1+end+1]
			if name == DeviceUUIDPlaceholder {
				parts = append(parts, lit.String())
				lit.Reset()
			} else {
				unknown = append(unknown, name)
			}
			i += end + 1
		default:
			lit.WriteByte(text[i])
		}
	}
	parts = append(parts, lit.String())

	if len(unknown) > 0 {
		return fail(ErrUnknownPlaceholder, fmt.Sprintf(
			"unknown placeholder(s) %s; the only placeholder is %s. Paths must be keyed by the physical GPU: "+
				"ranks are unique only inside one job, so rank-keyed paths let two jobs on one host find each other's daemons",
			strings.Join(unknown, ", "), DeviceUUIDPlaceholder), unknown)
	}
	if len(parts) < 2 {
		return fail(ErrMissingPlaceholder, fmt.Sprintf(
			"the template has no %s placeholder, so every GPU would share one path; paths must be keyed by the "+
				"physical device UUID (keying them by anything else, such as a rank, lets two jobs on one host find "+
				"each other's daemons)", DeviceUUIDPlaceholder), nil)
	}
	if !filepath.IsAbs(text) {
		return fail(ErrRelativeTemplate, "the template must be an absolute path (it starts with '/')", nil)
	}
	if strings.Contains(text, "..") {
		return fail(ErrUnsafeTemplate, `the template must not contain ".."`, nil)
	}
	return Template{text: text, parts: parts}, nil
}

// MustParseTemplate is ParseTemplate for constant templates in tests and
// examples; it panics on error.
func MustParseTemplate(source, text string) Template {
	t, err := ParseTemplate(source, text)
	if err != nil {
		panic(err)
	}
	return t
}

// Expand substitutes uuid for every {device_uuid}. The UUID is validated
// first (*InvalidUUIDError); the zero Template is an error wrapping
// ErrEmptyTemplate.
func (t Template) Expand(uuid string) (string, error) {
	if len(t.parts) < 2 {
		return "", fmt.Errorf("expand path template: %w", ErrEmptyTemplate)
	}
	if err := ValidateDeviceUUID(uuid); err != nil {
		return "", err
	}
	return strings.Join(t.parts, uuid), nil
}

// String returns the template text as given to ParseTemplate.
func (t Template) String() string { return t.text }

// IsZero reports whether t is the zero (unparsed) Template.
func (t Template) IsZero() bool { return len(t.parts) == 0 }

// glob returns the template with every placeholder replaced by "*" and every
// glob metacharacter in the literal text escaped.
func (t Template) glob() string {
	escaped := make([]string, len(t.parts))
	for i, p := range t.parts {
		escaped[i] = GlobEscape(p)
	}
	return strings.Join(escaped, "*")
}

// GlobEscape returns s with every metacharacter of filepath.Match (*, ?,
// [ and \\) escaped, so that a glob matches s literally.
func GlobEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
