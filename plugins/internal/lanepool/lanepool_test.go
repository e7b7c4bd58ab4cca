package lanepool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

type lane struct{ buffers, size int }

func TestPoolBoundsReusesAndReplaces(t *testing.T) {
	var created, destroyed atomic.Int32
	p := New(2, Funcs[*lane]{
		Create:  func(b, s int) (*lane, error) { created.Add(1); return &lane{b, s}, nil },
		Destroy: func(*lane) error { destroyed.Add(1); return nil },
		Fits:    func(l *lane, b, s int) bool { return l.buffers == b && l.size >= s },
	}, nil)
	ctx := context.Background()
	a, _ := p.Take(ctx, 2, 10)
	b, _ := p.Take(ctx, 2, 10)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := p.Take(short, 2, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third Take of a 2-lane pool = %v, want to wait until the context ends", err)
	}
	p.Put(a, nil)
	if c, _ := p.Take(ctx, 2, 5); c != a {
		t.Fatal("an idle lane that fits was not reused")
	}
	p.Put(a, errors.New("stream broke"))
	p.Put(b, nil)
	if c, _ := p.Take(ctx, 3, 10); c == b || c.buffers != 3 {
		t.Fatal("a lane of another shape was handed out")
	}
	if created.Load() != 3 || destroyed.Load() != 2 {
		t.Fatalf("created %d destroyed %d, want 3 and 2 (the failed lane and the replaced one)", created.Load(), destroyed.Load())
	}
	if err := p.Free(); err == nil {
		t.Fatal("Free with a lane still taken succeeded")
	}
}

func TestCreateFailureGivesTheSlotBack(t *testing.T) {
	fail := true
	p := New(1, Funcs[*lane]{
		Create: func(b, s int) (*lane, error) {
			if fail {
				return nil, errors.New("out of pinned memory")
			}
			return &lane{b, s}, nil
		},
		Destroy: func(*lane) error { return nil },
		Fits:    func(*lane, int, int) bool { return true },
	}, nil)
	if _, err := p.Take(context.Background(), 2, 1); err == nil {
		t.Fatal("Take succeeded while Create fails")
	}
	fail = false
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := p.Take(ctx, 2, 1)
	if err != nil {
		t.Fatalf("Take after a failed Create = %v: the slot was not given back", err)
	}
	p.Put(l, nil)
	if err := p.Free(); err != nil {
		t.Fatal(err)
	}
}
