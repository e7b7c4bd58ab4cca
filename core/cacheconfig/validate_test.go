package cacheconfig_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
)

func TestValidateAccepts(t *testing.T) {
	for name, c := range map[string]cacheconfig.Config{
		"full": full(),
		"digest only": func() cacheconfig.Config {
			c := cacheconfig.Default()
			c.CheckpointDigest = full().CheckpointDigest
			return c
		}(),
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *cacheconfig.Config)
		fields []string
	}{
		{"nothing names the weights", func(c *cacheconfig.Config) { c.Model, c.CheckpointDigest = "", "" }, []string{"model"}},
		{"digest without prefix", func(c *cacheconfig.Config) { c.CheckpointDigest = "abc" }, []string{"checkpoint_digest"}},
		{"digest uppercase", func(c *cacheconfig.Config) {
			c.CheckpointDigest = "sha256:ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"
		}, []string{"checkpoint_digest"}},
		{"digest short", func(c *cacheconfig.Config) { c.CheckpointDigest = "sha256:abab" }, []string{"checkpoint_digest"}},
		{"tp size 0", func(c *cacheconfig.Config) { c.TPSize, c.TPRank = 0, 0 }, []string{"tp_size"}},
		{"tp rank = size", func(c *cacheconfig.Config) { c.TPRank = 4 }, []string{"tp_rank"}},
		{"pp rank > size", func(c *cacheconfig.Config) { c.PPRank = 9 }, []string{"pp_rank"}},
		{"dp size 0", func(c *cacheconfig.Config) { c.DPSize = 0 }, []string{"dp_size"}},
		{"ep rank = size", func(c *cacheconfig.Config) { c.EPRank = 8 }, []string{"ep_rank"}},
		{"protocol 0", func(c *cacheconfig.Config) { c.ProtocolVersion = 0 }, []string{"protocol_version"}},
		{"invalid UTF-8 value", func(c *cacheconfig.Config) { c.EngineName = "\xff" }, []string{"engine_name"}},
		{"invalid UTF-8 extra key", func(c *cacheconfig.Config) { c.Extra = map[string]string{"\xff": "x"} }, []string{"extra.\uFFFD"}},
		{"empty extra key", func(c *cacheconfig.Config) { c.Extra = map[string]string{"": "x"} }, []string{"extra."}},
		{"several at once", func(c *cacheconfig.Config) { c.TPRank, c.PPSize, c.ProtocolVersion = 7, 0, 0 },
			[]string{"tp_rank", "pp_size", "protocol_version"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := full()
			tc.mutate(&c)
			err := c.Validate()
			if !errors.Is(err, cacheconfig.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var fe *cacheconfig.FieldError
				if !errors.As(e, &fe) || fe.Reason == "" {
					t.Fatalf("%v is not a *FieldError with a reason", e)
				}
				got = append(got, fe.Field)
			}
			if !slices.Equal(got, tc.fields) {
				t.Fatalf("fields %v, want %v (%v)", got, tc.fields, err)
			}
		})
	}
}
