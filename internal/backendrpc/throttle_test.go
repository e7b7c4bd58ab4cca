package backendrpc

import (
	"errors"
	"testing"
	"time"
)

func TestProgressThrottle(t *testing.T) {
	now := time.Unix(0, 0)
	var sent []uint64
	fail := false
	p := newProgressThrottle(1<<30, func() time.Time { return now }, func(done uint64) error {
		if fail {
			return errors.New("stream broken")
		}
		sent = append(sent, done)
		return nil
	})
	p.report(1, 0) // first report goes out at once
	p.report(2, 0) // too soon, too little
	now = now.Add(progressTimeInterval)
	p.report(3, 0) // time passed
	p.report(3+progressBytesInterval, 0)
	p.report(2, 0)     // going backwards is ignored
	p.report(1<<30, 0) // the total is left to the final message
	want := []uint64{1, 3, 3 + progressBytesInterval}
	if len(sent) != len(want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	for i := range want {
		if sent[i] != want[i] {
			t.Fatalf("sent %v, want %v", sent, want)
		}
	}
	fail = true
	now = now.Add(time.Second)
	p.report(1<<29, 0)
	if p.sendErr() == nil {
		t.Fatal("a failed send was not remembered")
	}
}
