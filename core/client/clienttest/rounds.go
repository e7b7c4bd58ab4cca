// Package clienttest holds test helpers over core/client that the core's
// own tests and test/ share: it may be imported by tests of core/daemon,
// which cannot import test/ (nothing outside test/ does) nor daemontest
// (an import cycle).
package clienttest

import (
	"errors"
	"sync"

	"github.com/wcache/wcache/core/client"
)

// AttachRounds runs clients goroutines at once, each of which attaches
// with attach and closes the lease, rounds times, and returns what failed:
// an attach, a close or an empty manifest, at most one error a client
// (nil: none failed).
func AttachRounds(clients, rounds int, attach func() (*client.Attachment, error)) error {
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < rounds; j++ {
				a, err := attach()
				if err != nil {
					errs <- err
					return
				}
				empty := len(a.Manifest.Tensors) == 0
				if err := a.Lease.Close(); err != nil {
					errs <- err
					return
				}
				if empty {
					errs <- errors.New("empty manifest")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}
