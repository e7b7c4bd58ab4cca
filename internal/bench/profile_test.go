package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The profiles run the real daemon and mock backend code in this process;
// each summary must name the code it profiled.
func TestProfilesOfTheSlowPaths(t *testing.T) {
	o := tinyOptions(t)
	o.ProfileLoop = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, _, err := GenerateModel(t.TempDir(), ModelSpec{Bytes: 32 << 20, Tensors: 30})
	if err != nil {
		t.Fatal(err)
	}
	before := shmLeftovers(t, o.ShmDir)
	for name, c := range map[string]struct {
		run  func(context.Context, Options, *Model) (string, error)
		want string
	}{
		"fill":    {profileFill, "mockbackend"},
		"startup": {profileStartup, "# by cumulative time"},
		"attach":  {profileAttach, "# by own time"},
		"restart": {profileRestartAttach, "# by own time"},
		"python": {func(ctx context.Context, o Options, m *Model) (string, error) {
			return profilePythonAttach(ctx, o, m, 3)
		}, "attach_torch.py"},
	} {
		top, err := c.run(ctx, o, m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(top, c.want) || !strings.Contains(top, "flat%") && !strings.Contains(top, "cumtime") {
			t.Errorf("%s profile lacks %q:\n%s", name, c.want, top)
		}
	}
	if after := shmLeftovers(t, o.ShmDir); len(after) != len(before) {
		t.Errorf("shared-memory folders left behind: %v", after)
	}
}
