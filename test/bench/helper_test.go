package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/wcache/wcache/test/testproc"
)

func TestHelperReadFiles(t *testing.T) {
	m, _, err := testproc.GenerateModel(t.TempDir(), ModelSpec{Bytes: 1 << 20, Tensors: 21})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := RunHelper(context.Background(), []string{helperReadFiles, m.Dir}, &out); err != nil {
		t.Fatal(err)
	}
	var r HelperResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("helper output %q: %v", out.String(), err)
	}
	if r.Tensors != m.Tensors || r.Bytes != m.Bytes {
		t.Errorf("read %d tensors of %d bytes, the checkpoint has %d of %d", r.Tensors, r.Bytes, m.Tensors, m.Bytes)
	}
	if r.WorkNS <= 0 || r.Steps["headers"] <= 0 || r.Steps["read"] <= 0 || r.Steps["headers"]+r.Steps["read"] != r.WorkNS {
		t.Errorf("times: work %d, steps %v", r.WorkNS, r.Steps)
	}
}

func TestHelperRejectsBadUsage(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no mode":       {nil, "want read-files DIR"},
		"unknown mode":  {[]string{"teleport", "/x"}, `"teleport"`},
		"no model":      {[]string{helperReadFiles}, "want read-files DIR"},
		"attach no dev": {[]string{helperAttach, "/x"}, "DEVICE_UUID DEVICE_CAPABILITY"},
		"missing dir":   {[]string{helperReadFiles, "/nonexistent/wcache-bench"}, "/nonexistent/wcache-bench"},
	} {
		err := RunHelper(context.Background(), c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}
