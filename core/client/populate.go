package client

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Populate is how the client's mappers (DefaultMappers: posix-shm, memfd)
// map the pages of a host handle ahead of the reader: with
// madvise(MADV_POPULATE_READ) (Linux 5.14), every page of the mapping in
// one call, read-only and shared — nothing copied, a write still copies
// only its page — so that reading every tensor takes no page fault (the
// kernel maps up to 16 pages a fault, and 4 GiB of a long-lived daemon's
// memory took 589,000 faults). A kernel without the call (EINVAL), or any failure, leaves the
// pages to their first read. The default is PopulateOff, by measurement
// (docs/python-client.md, "Populating host memory").
type Populate string

const (
	// PopulateAsync populates on a goroutine of its own,
	// populateChunk bytes a call from the end of the mapping backwards (a
	// reader walking the weights in order meets it halfway rather than
	// faulting the same pages beside it): Map returns at once, a caller
	// that reads part of the weights is not slowed, and the mapping's
	// Release stops it and waits for its call to end before it unmaps.
	PopulateAsync Populate = "async"
	// PopulateSync populates before Map returns: for a caller that reads
	// every weight.
	PopulateSync Populate = "sync"
	// PopulateOff (the default) leaves every page to its first read.
	PopulateOff Populate = "off"
)

// PopulateEnv names the environment variable PopulateFromEnv reads.
const PopulateEnv = "WCACHE_POPULATE"

// PopulateFromEnv returns the mode $WCACHE_POPULATE names (empty:
// PopulateOff); an error for any other value.
func PopulateFromEnv() (Populate, error) {
	raw := os.Getenv(PopulateEnv)
	switch p := Populate(strings.ToLower(strings.TrimSpace(raw))); p {
	case "":
		return PopulateOff, nil
	case PopulateAsync, PopulateSync, PopulateOff:
		return p, nil
	}
	return "", fmt.Errorf("%s=%q: want async, sync or off", PopulateEnv, raw)
}

// populateChunk is the most one madvise call of an async populate covers.
const populateChunk = 64 << 20

// populateRead is madvise(MADV_POPULATE_READ) over data.
func populateRead(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return unix.Madvise(data, unix.MADV_POPULATE_READ)
}

// populated starts populating data per mode and returns a function that
// waits until no populate call is running on data (call it before
// unmapping).
func populated(data []byte, mode Populate) (wait func()) {
	switch mode {
	case PopulateOff:
		return func() {}
	case PopulateSync:
		_ = populateRead(data)
		return func() {}
	}
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for end := len(data); end > 0; end -= populateChunk {
			select {
			case <-stop:
				return
			default:
			}
			if populateRead(data[max(0, end-populateChunk):end]) != nil {
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop) }); <-done }
}
