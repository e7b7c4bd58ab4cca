package fdpass

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// tempFile is a file holding content.
func tempFile(t *testing.T, content string) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestChannelCarriesTaggedDescriptorsBothWays(t *testing.T) {
	a, remote, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := FileConn(remote)
	remote.Close()
	if err != nil {
		t.Fatal(err)
	}
	left, right := NewChannel(a), NewChannel(b)
	defer left.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t1, err := left.Send(tempFile(t, "one"))
	if err != nil {
		t.Fatal(err)
	}
	t2, err := left.Send(tempFile(t, "two"))
	if err != nil || t1 == 0 || t2 == t1 {
		t.Fatalf("tokens %d, %d (%v): want distinct, non-zero", t1, t2, err)
	}
	// Taken out of order: each token gets its own descriptor.
	for token, want := range map[uint64]string{t2: "two", t1: "one"} {
		f, err := right.Take(ctx, token)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8)
		n, _ := f.ReadAt(buf, 0)
		f.Close()
		if string(buf[:n]) != want {
			t.Errorf("token %d: %q, want %q", token, buf[:n], want)
		}
	}
	back, err := right.Send(tempFile(t, "back"))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := left.Take(ctx, back); err != nil {
		t.Errorf("the other way: %v", err)
	} else {
		f.Close()
	}
	// A token never sent: Take ends with its context, and with ErrChannelClosed
	// once the peer is gone.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := right.Take(short, 999); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Take of a token never sent: %v", err)
	}
	right.Close()
	if _, err := left.Take(ctx, 999); !errors.Is(err, ErrChannelClosed) {
		t.Errorf("Take after the peer closed: %v, want ErrChannelClosed", err)
	}
	if _, err := left.Take(ctx, 0); err == nil {
		t.Error("Take(0) succeeded")
	}
}
