package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/cacheconfig"
)

func parseConfigFlags(t *testing.T, args ...string) (cacheconfig.Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cf := addConfigFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cf.config()
}

func TestConfigFlagsDefaultIsSingleGPUUnquantized(t *testing.T) {
	c, err := parseConfigFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, cacheconfig.Default()) {
		t.Errorf("config = %+v, want cacheconfig.Default() %+v", c, cacheconfig.Default())
	}
}

func TestConfigFlagsEveryField(t *testing.T) {
	c, err := parseConfigFlags(t, "--tp-size", "8", "--tp-rank", "7", "--pp-size", "2", "--pp-rank", "1",
		"--dp-size", "3", "--dp-rank", "2", "--ep-size", "4", "--ep-rank", "3", "--dtype", "bf16",
		"--quantization", "fp8", "--quantization-config-digest", "q", "--revision", "r", "--model-arch", "A",
		"--extra", "attn_dp=2", "--extra", "cp=a=b", "--extra", "empty=", "--engine-name", "sglang",
		"--engine-version", "0.5", "--device-capability", "9.0")
	if err != nil {
		t.Fatal(err)
	}
	want := cacheconfig.Default()
	want.TPSize, want.TPRank, want.PPSize, want.PPRank = 8, 7, 2, 1
	want.DPSize, want.DPRank, want.EPSize, want.EPRank = 3, 2, 4, 3
	want.DType, want.Quantization, want.QuantizationConfigDigest, want.Revision, want.ModelArch = "bf16", "fp8", "q", "r", "A"
	want.Extra = map[string]string{"attn_dp": "2", "cp": "a=b", "empty": ""}
	want.EngineName, want.EngineVersion, want.DeviceCapability = "sglang", "0.5", "9.0"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("config = %+v\nwant %+v", c, want)
	}
}

func TestConfigFlagsUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--extra", "novalue"},
		{"--extra", "=v"},
		{"--extra", "k=1", "--extra", "k=2"},
		{"--tp-size", "2", "--tp-rank", "2"},
		{"--pp-size", "0"},
		{"--dtype", "bflaot16"},
		{"--tp-size", "1000000000"},
		{"--ep-size", "1048577"},
	} {
		_, err := parseConfigFlags(t, args...)
		var xe *exitError
		if !errors.As(err, &xe) || xe.code != ExitUsage {
			t.Errorf("%v: err = %v, want a usage error (exit 2)", args, err)
		}
	}
}

func TestConfigFlagsRankWithoutSizeNamesTheMissingSize(t *testing.T) {
	_, err := parseConfigFlags(t, "--tp-rank", "1")
	var ce *exitError
	if err == nil || !errors.As(err, &ce) || ce.code != ExitUsage || !strings.Contains(err.Error(), "--tp-rank 1 needs --tp-size") {
		t.Fatalf("--tp-rank 1 alone: %v, want a usage error naming --tp-size", err)
	}
	if _, err := parseConfigFlags(t, "--tp-rank", "1", "--tp-size", "2"); err != nil {
		t.Fatalf("--tp-rank 1 --tp-size 2: %v", err)
	}
}

// TestConfigFlagsUnknownDTypeNamesTheVocabulary: a misspelt --dtype is
// refused with the accepted spellings; every alias of the vocabulary passes.
func TestConfigFlagsUnknownDTypeNamesTheVocabulary(t *testing.T) {
	_, err := parseConfigFlags(t, "--dtype", "bflaot16")
	if err == nil || !strings.Contains(err.Error(), `"bflaot16"`) || !strings.Contains(err.Error(), "bf16, fp16") {
		t.Fatalf("--dtype bflaot16: %v, want a refusal naming the vocabulary", err)
	}
	for _, ok := range []string{"auto", "BF16", "bfloat16", "torch.float16", "half", "fp8_e4m3fn", ""} {
		if _, err := parseConfigFlags(t, "--dtype", ok); err != nil {
			t.Errorf("--dtype %q: %v", ok, err)
		}
	}
}
