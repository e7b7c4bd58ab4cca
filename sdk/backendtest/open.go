package backendtest

import (
	"io"
	"testing"
)

// Open returns the backend (or other Closer) open returns, for a test
// that runs it in process: it is closed at the test's cleanup, and a
// failed Close fails the test; a failed open ends the test.
func Open[B io.Closer](t testing.TB, open func() (B, error)) B {
	t.Helper()
	b, err := open()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}
