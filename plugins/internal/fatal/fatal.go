// Package fatal is how a GPU backend handles a driver error that leaves
// the process unable to use the device again (CUDA's sticky errors, HIP's
// illegal address or uncorrectable ECC): a Latch keeps the first such
// error and closes a channel, and ExitOn waits for it, logs it and exits
// the plugin, so that the daemon stops with the reason instead of turning
// every later request into the same failure. The CUDA and ROCm backends
// use it.
package fatal

import (
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
)

// Latch keeps the first fatal error. Its zero value is ready to use and it
// is safe for concurrent use.
type Latch struct {
	mu  sync.Mutex
	err error
	ch  chan struct{} // closed when err is set
}

// Set records err unless an error is already recorded.
func (l *Latch) Set(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || err == nil {
		return
	}
	l.err = err
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	close(l.ch)
}

// Done is closed when the first error is recorded.
func (l *Latch) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

// Err returns the recorded error, or nil.
func (l *Latch) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// ExitOn waits until done is closed, logs msg with err() and calls
// exit(sdk.ExitFatal), the one exit status of a plugin that ends on a
// failure it cannot survive. It returns without exiting when stop is closed first.
// Main functions run it on a goroutine of their own for the life of the
// process.
func ExitOn(done <-chan struct{}, err func() error, logger hclog.Logger, msg string, stop <-chan struct{}, exit func(int)) {
	select {
	case <-done:
	case <-stop:
		return
	}
	logger.Error(msg, "error", err())
	exit(sdk.ExitFatal)
}
