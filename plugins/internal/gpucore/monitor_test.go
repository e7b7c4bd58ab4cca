package gpucore_test

import (
	"errors"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gpucore"
)

type library struct{ closed int }

func (l *library) Close() error {
	l.closed++
	if l.closed > 1 {
		return errors.New("closed twice")
	}
	return nil
}

// A Monitor holds its library until Close, which closes it exactly once.
func TestMonitorClosesItsLibraryOnce(t *testing.T) {
	var m gpucore.Monitor[*library]
	if m.Get() != nil || m.Close() != nil {
		t.Fatal("the zero Monitor holds a library")
	}
	lib := &library{}
	m.Set(lib)
	if m.Get() != lib {
		t.Fatal("Get does not return the library Set gave")
	}
	for range 2 {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if lib.closed != 1 || m.Get() != nil {
		t.Fatalf("closed %d times, Get after Close = %v; want once and none", lib.closed, m.Get())
	}
}
