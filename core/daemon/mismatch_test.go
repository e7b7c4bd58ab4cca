package daemon

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
)

// TestAttachMismatchIsBoundedAndSentOnce: a client whose config differs in
// 200 extra keys of 1 KiB each (far above the 8 KiB of metadata gRPC clients
// accept by default) gets a structured mismatch whose diffs fit the bound,
// with the rest counted, and a status message that names fields but carries
// no value.
func TestAttachMismatchIsBoundedAndSentOnce(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	value := strings.Repeat("v", 1024)
	_, err := r.attach(t, func(c *cacheconfig.Config) {
		c.Extra = map[string]string{}
		for i := range 200 {
			c.Extra[fmt.Sprintf("knob%03d", i)] = value
		}
	})
	me, ok := client.IsMismatch(err)
	if !ok {
		t.Fatalf("err = %v, want a mismatch", err)
	}
	if me.Omitted == 0 || len(me.Diffs)+me.Omitted != 200 {
		t.Fatalf("%d diffs and %d omitted, want 200 in all with some omitted", len(me.Diffs), me.Omitted)
	}
	size := 0
	for _, d := range me.Diffs {
		if !d.DaemonAbsent || d.ClientAbsent || d.Daemon != "" || !d.Truncated || len(d.Client) != cacheconfig.MaxDiffValueBytes {
			t.Fatalf("diff %+v: want an absent daemon side and a client value cut to %d bytes", d, cacheconfig.MaxDiffValueBytes)
		}
		size += len(d.Field) + len(d.Client)
	}
	if size > cacheconfig.MaxMismatchBytes {
		t.Fatalf("diffs hold %d bytes, above %d", size, cacheconfig.MaxMismatchBytes)
	}
	if !strings.Contains(me.Error(), fmt.Sprintf("+%d more", me.Omitted)) {
		t.Errorf("message lacks the omitted count: %s", me.Error())
	}

	// The status itself: the message names fields only; the values travel
	// once, in the detail.
	st := status.Convert(mismatchStatus([]cacheconfig.FieldDiff{{Field: "extra.knob", Client: value, DaemonAbsent: true}}))
	if st.Code() != codes.FailedPrecondition || strings.Contains(st.Message(), "vvvv") ||
		!strings.Contains(st.Message(), "extra.knob") {
		t.Fatalf("status message %q: want the field name and no value", st.Message())
	}
	if len(st.Details()) != 1 {
		t.Fatalf("details %v, want one ConfigMismatch", st.Details())
	}
}
