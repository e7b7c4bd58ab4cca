// Package childproc holds what tests that run processes share: StartPiped,
// for a child the test talks to over its standard input and output (a
// re-run test binary, a client under another uid); Buffer, for output
// written by other goroutines while the test reads it; and the processes
// tests point at, ExitedPID (one that has ended) and Sleeper (a live one
// that is no daemon). It sits in internal/ so that the tests of core, plugins
// and test/ share it, and it does not import testing (a *testing.T is a
// T), so test harnesses that build into binaries (test/testproc) can use
// it too.
package childproc

import (
	"bufio"
	"io"
	"os/exec"
)

// T is what StartPiped needs of a *testing.T.
type T interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// StartPiped starts cmd with a pipe to its standard input and one from its
// standard output, and returns them; set cmd's Env, Stderr and SysProcAttr
// before. It fails t if a pipe or the start fails. cmd is killed at the
// test's cleanup unless it has ended (closing stdin and waiting is the
// caller's way to end it; a cleanup the caller registers after StartPiped
// runs before this one).
func StartPiped(t T, cmd *exec.Cmd) (io.WriteCloser, *bufio.Reader) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return stdin, bufio.NewReader(stdout)
}
