package gputest

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// Unavailable is a plugin environment whose vendor library cannot be used
// (CheckUnavailableReachesTheHost): Env starts the plugin, Want is what
// the error must say.
type Unavailable struct {
	Env  []string
	Want string
}

// CheckUnavailableReachesTheHost starts the plugin with each case's
// environment (start: through the go-plugin boundary) and checks that it
// still serves: Info answers with want's Platform (and HandleKinds, when
// want has them), Devices fails with ErrUnavailable saying the case's
// Want, and Allocate with ErrUnavailable. A GPU plugin whose library is
// missing reaches the host typed, not as a dead process.
func CheckUnavailableReachesTheHost(t *testing.T, start func(t *testing.T, env []string) sdk.Backend, want sdk.Info, cases map[string]Unavailable) {
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := start(t, tc.Env)
			ctx := context.Background()
			info, err := b.Info(ctx)
			if err != nil || info.Platform != want.Platform ||
				(want.HandleKinds != nil && strings.Join(info.HandleKinds, ",") != strings.Join(want.HandleKinds, ",")) {
				t.Fatalf("Info = %+v, %v; want the %s backend's info (%+v)", info, err, want.Platform, want)
			}
			if _, err := b.Devices(ctx); !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), tc.Want) {
				t.Fatalf("Devices = %v, want ErrUnavailable containing %q", err, tc.Want)
			}
			if _, _, err := b.Allocate(ctx, 0, 4096); !errors.Is(err, sdk.ErrUnavailable) {
				t.Fatalf("Allocate = %v, want ErrUnavailable", err)
			}
		})
	}
}

// CheckRunByHandExplains runs the plugin binary at path as a user would,
// outside a host, and checks it exits with status 1 and says it is a
// wcache backend plugin.
func CheckRunByHandExplains(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "wcache backend plugin") {
		t.Fatalf("running the plugin by hand: %v\n%s\nwant exit status 1 and an explanation", err, out)
	}
}
