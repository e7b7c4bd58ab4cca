package bench

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseOptionsDefaults(t *testing.T) {
	o, err := ParseOptions(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.LargeBytes != 4<<30 || o.SmallBytes != 256<<20 || o.FewTensors != 300 || o.ManyTensors != 3000 {
		t.Errorf("sizes: %+v", o)
	}
	if o.Repeats != 5 || o.AttachIters != 300 || o.Clients != 64 || o.ConcurrencyDuration != 10*time.Second {
		t.Errorf("counts: %+v", o)
	}
	if !slices.Equal(o.Scenarios, scenarioNames()) || !o.Cold {
		t.Errorf("switches: %+v", o)
	}
	if o.OutDir != "bench-results" || o.Python != "/usr/bin/python3" {
		t.Errorf("paths: %+v", o)
	}
	if len(o.HelperArgv) != 2 || o.HelperArgv[1] != HelperCommand {
		t.Errorf("HelperArgv = %q", o.HelperArgv)
	}
}

func TestParseOptionsEnvAndFlags(t *testing.T) {
	e := env(map[string]string{EnvVar("gib"): "1.5", EnvVar("repeats"): "3", EnvVar("only"): "attach,fill", EnvVar("seconds"): "0.5"})
	o, err := ParseOptions([]string{"-repeats", "7", "-small-mib", "64"}, e)
	if err != nil {
		t.Fatal(err)
	}
	if o.LargeBytes != 3<<29 {
		t.Errorf("WCACHE_BENCH_GIB=1.5: LargeBytes = %d", o.LargeBytes)
	}
	if o.Repeats != 7 {
		t.Errorf("the flag must win over the environment: Repeats = %d", o.Repeats)
	}
	if o.SmallBytes != 64<<20 || o.ConcurrencyDuration != 500*time.Millisecond {
		t.Errorf("small %d, duration %s", o.SmallBytes, o.ConcurrencyDuration)
	}
	if !slices.Equal(o.Scenarios, []string{"attach", "fill"}) {
		t.Errorf("scenarios %q", o.Scenarios)
	}
}

func TestParseOptionsRejects(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad env number":    {env: map[string]string{EnvVar("gib"): "lots"}, want: EnvVar("gib")},
		"zero repeats env":  {env: map[string]string{EnvVar("repeats"): "0"}, want: EnvVar("repeats")},
		"fractional count":  {env: map[string]string{EnvVar("clients"): "2.5"}, want: EnvVar("clients")},
		"unknown scenario":  {args: []string{"-only", "restart,warp"}, want: `unknown scenario "warp"`},
		"large below small": {args: []string{"-gib", "0.1", "-small-mib", "512"}, want: "smaller than the small one"},
		"few tensors":       {args: []string{"-few-tensors", "5"}, want: "tensor counts"},
		"stray argument":    {args: []string{"now"}, want: "unexpected arguments"},
		"unknown flag":      {args: []string{"-fast"}, want: "-fast"},
	} {
		_, err := ParseOptions(c.args, env(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
	if _, err := ParseOptions([]string{"-h"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: err = %v, want flag.ErrHelp", err)
	}
}

func TestParseOptionsQuick(t *testing.T) {
	o, err := ParseOptions([]string{"-quick", "-repeats", "3"}, env(map[string]string{EnvVar("gib"): "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.LargeBytes != 1<<30 || o.Repeats != 3 {
		t.Errorf("a variable and a flag must win over -quick: large %d, repeats %d", o.LargeBytes, o.Repeats)
	}
	if o.SmallBytes != 32<<20 || o.HashBytes != 64<<20 || o.IdentityTensors != 20000 || o.AttachIters != 30 {
		t.Errorf("-quick sizes: %+v", o)
	}
}
