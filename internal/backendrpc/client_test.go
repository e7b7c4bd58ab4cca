package backendrpc

import (
	"context"
	"errors"
	"github.com/wcache/wcache/sdk"
	"io"
	"strings"
	"testing"

	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
)

// TestRecvFinal: recvFinal reports every progress message but the final
// one, returns the final one, and calls a stream that ends before it a
// sdk.TransportError (sdk.ErrUnavailable) saying what did not complete.
func TestRecvFinal(t *testing.T) {
	stream := func(msgs ...*backendv1.LoadProgress) func() (*backendv1.LoadProgress, error) {
		return func() (*backendv1.LoadProgress, error) {
			if len(msgs) == 0 {
				return nil, io.EOF
			}
			m := msgs[0]
			msgs = msgs[1:]
			return m, nil
		}
	}
	var seen [][2]uint64
	progress := func(done, total uint64) { seen = append(seen, [2]uint64{done, total}) }
	final, err := recvFinal(context.Background(), "Load", "load", stream(
		&backendv1.LoadProgress{BytesDone: 1, BytesTotal: 3},
		&backendv1.LoadProgress{BytesDone: 2, BytesTotal: 3},
		&backendv1.LoadProgress{BytesDone: 3, BytesTotal: 3, Done: true},
		&backendv1.LoadProgress{BytesDone: 9, BytesTotal: 9},
	), progress)
	if err != nil || final.GetBytesDone() != 3 || !final.GetDone() {
		t.Fatalf("recvFinal = %v, %v; want the final message", final, err)
	}
	if len(seen) != 2 || seen[0] != [2]uint64{1, 3} || seen[1] != [2]uint64{2, 3} {
		t.Fatalf("progress calls %v, want (1, 3) and (2, 3)", seen)
	}

	_, err = recvFinal(context.Background(), "Load", "load", stream(&backendv1.LoadProgress{BytesDone: 1, BytesTotal: 3}), nil)
	var te *sdk.TransportError
	if !errors.As(err, &te) || te.Op != "Load" || !errors.Is(err, sdk.ErrUnavailable) ||
		!strings.Contains(err.Error(), "progress stream ended before the load completed") {
		t.Fatalf("a stream ending early: %v, want a sdk.TransportError for Load", err)
	}
}
