package backendtest

import (
	"errors"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// The Configure subtests hold for every backend: one without options
// accepts an empty configuration and refuses any key; one with options
// declares a valid schema, serves with its defaults and refuses a key it
// does not declare, naming it and listing the ones it knows. Through a
// plugin they cross the boundary (sdk.Configure sends the values, the
// plugin resolves them).

func (s *suite) testConfigureSchema(t *testing.T) {
	b := s.newBackend(t)
	opts, err := sdk.OptionsOf(s.ctx(t), b)
	if err != nil {
		t.Fatalf("options: %v", err)
	}
	if err := sdk.ValidateSchema(opts); err != nil {
		t.Fatalf("the declared options: %v", err)
	}
	for _, o := range opts {
		if strings.TrimSpace(o.Description) == "" {
			t.Errorf("option %s has no description (wcache devices --describe shows it)", o.Name)
		}
	}
}

func (s *suite) testConfigureDefaults(t *testing.T) {
	b := s.newBackend(t)
	if err := sdk.Configure(s.ctx(t), b, nil); err != nil {
		t.Fatalf("Configure with no values: %v", err)
	}
	s.assertUsable(t, b)
}

func (s *suite) testConfigureUnknownKey(t *testing.T) {
	b := s.newBackend(t)
	ctx := s.ctx(t)
	opts, err := sdk.OptionsOf(ctx, b)
	if err != nil {
		t.Fatalf("options: %v", err)
	}
	const key = "backendtest-no-such-option"
	err = sdk.Configure(ctx, b, map[string]string{key: "1"})
	wantKind(t, "Configure with an unknown key", err, sdk.ErrInvalidArgument)
	if !strings.Contains(err.Error(), key) {
		t.Errorf("the error %q does not name the unknown key", err)
	}
	for _, o := range opts {
		if !strings.Contains(err.Error(), o.Name) {
			t.Errorf("the error %q does not list the known key %s", err, o.Name)
		}
	}
	var te *sdk.TransportError
	if errors.As(err, &te) {
		t.Errorf("the refusal came as a transport failure: %v", err)
	}
}
