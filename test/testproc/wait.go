package testproc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
)

// pollInterval is how often the waits look again by default (Options.Poll).
const pollInterval = 20 * time.Millisecond

// ErrExited: the process exited before what was waited for happened.
var ErrExited = errors.New("process exited")

// WaitReady waits until the ready file at path names this process and
// returns it. It fails (with the process's output) when the process exits
// first (ErrExited), after timeout, or when ctx ends.
func (p *Process) WaitReady(ctx context.Context, path string, timeout time.Duration) (daemonfile.Ready, error) {
	var r daemonfile.Ready
	err := p.pollUntil(ctx, timeout, "ready file "+path, func() bool {
		got, err := daemonfile.ReadReady(path)
		if err == nil && got.PID == p.PID() {
			r = got
			return true
		}
		return false
	})
	return r, err
}

// WaitOutput waits until the process's output (stdout and stderr) contains
// want, with the same failures as WaitReady.
func (p *Process) WaitOutput(ctx context.Context, want string, timeout time.Duration) error {
	return p.pollUntil(ctx, timeout, fmt.Sprintf("output %q", want), func() bool {
		return strings.Contains(p.Output(), want)
	})
}

// WaitFor waits until cond holds, with the same failures as WaitReady;
// what names the wait in errors.
func (p *Process) WaitFor(ctx context.Context, what string, timeout time.Duration, cond func() bool) error {
	return p.pollUntil(ctx, timeout, what, cond)
}

// poll checks cond every Options.Poll.
func (p *Process) pollUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(p.poll)
	defer tick.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-p.done:
			if cond() {
				return nil
			}
			return fmt.Errorf("waiting for %s: %w (code %d):\n%s", what, ErrExited, p.ExitCode(), p)
		case <-deadline.C:
			return fmt.Errorf("waiting for %s: not there after %s:\n%s", what, timeout, p)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
