// Package cli implements the wcache command line. Each command lives in a
// file of its own; cmd/wcache only calls Main.
package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, documented in docs/operations.md.
const (
	ExitOK           = 0
	ExitFailure      = 1
	ExitUsage        = 2
	ExitNoDaemon     = 3
	ExitIncompatible = 4
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode makes err exit the process with code.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// usageErrorf is a usage error (exit 2).
func usageErrorf(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// env is what commands need from the process, passed in so tests can run
// commands in-process.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// Main runs the wcache command line with args and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRootCommand(e)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "wcache: %v\n", err)
	for _, h := range hints(cmd, err) {
		fmt.Fprintf(stderr, "wcache: hint: %s\n", h)
	}
	var xe *exitError
	if errors.As(err, &xe) {
		return xe.code
	}
	if isUsageError(err) {
		return ExitUsage
	}
	return ExitFailure
}

// isUsageError reports whether cobra rejected the command line itself.
func isUsageError(err error) bool {
	var fe *flagError
	return errors.As(err, &fe)
}

// flagError marks a cobra flag-parsing error.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

func newRootCommand(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "wcache",
		Short:         "Keep model weights resident on each GPU across engine restarts",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionLine(),
	}
	// --version prints what `wcache version` prints.
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &flagError{err: suggestFlag(cmd, err)} })
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return refuseNegativeDurations(cmd) }
	root.AddCommand(
		newVersionCommand(e),
		newLaunchCommand(e),
		newDemoCommand(e),
		newDevicesCommand(e),
		newServeCommand(e),
		newAttachCommand(e),
		newStatusCommand(e),
		newStopCommand(e),
		newPublishCommand(e),
		newEvictCommand(e),
		newCleanupCommand(e),
	)
	installAliases(root)
	return root
}

// refuseNegativeDurations makes a negative value of any duration flag a
// usage error (exit 2): no duration of wcache means anything below zero,
// and a negative value must not fall back silently to the flag's default.
func refuseNegativeDurations(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() != "duration" {
			return
		}
		if d, perr := time.ParseDuration(f.Value.String()); perr == nil && d < 0 {
			err = usageErrorf("--%s %s: a duration must not be negative", f.Name, f.Value)
		}
	})
	return err
}
