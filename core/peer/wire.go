package peer

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// maxMessageBytes bounds a control message (an offer of many arenas fits
// easily; a hostile length does not allocate).
const maxMessageBytes = 1 << 20

// errInternal is the kind of a peer's internal failure.
var errInternal = errors.New("peer internal error")

func writeMsg(w io.Writer, m proto.Message) error {
	if _, err := protodelim.MarshalTo(w, m); err != nil {
		return fmt.Errorf("write %T: %w", m, err)
	}
	return nil
}

func readMsg(r *bufio.Reader, m proto.Message) error {
	if err := (protodelim.UnmarshalOptions{MaxSize: maxMessageBytes}).UnmarshalFrom(r, m); err != nil {
		return fmt.Errorf("read %T: %w", m, err)
	}
	return nil
}
