package fdchannel

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRequestRoundTripAndRefusals(t *testing.T) {
	r := Request{Op: OpTakeover, ID: 0x0102030405060708}
	for i := range r.Token {
		r.Token[i] = byte(i)
	}
	b := r.Marshal()
	if len(b) != RequestSize || !bytes.Equal(b[:8], []byte{'W', 'C', 'F', 'D', 1, 0, 3, 0}) ||
		!bytes.Equal(b[8:16], []byte{8, 7, 6, 5, 4, 3, 2, 1}) || b[16] != 0 || b[47] != 31 {
		t.Fatalf("request bytes % x", b)
	}
	got, err := ParseRequest(b)
	if err != nil || got != r {
		t.Fatalf("ParseRequest = %+v, %v; want %+v", got, err, r)
	}
	for _, op := range []Op{OpLease, OpPublish, OpAttachWait} {
		w := Request{Op: op, Token: r.Token}
		if got, err := ParseRequest(w.Marshal()); err != nil || got != w {
			t.Errorf("op %s: ParseRequest = %+v, %v; want %+v", op, got, err, w)
		}
	}
	if OpAttachWait.String() != "attach-wait" || uint16(OpAttachWait) != 4 {
		t.Errorf("OpAttachWait is %q = %d, want \"attach-wait\" = 4 (the wire value)", OpAttachWait, uint16(OpAttachWait))
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"short":      func(b []byte) []byte { return b[:47] },
		"long":       func(b []byte) []byte { return append(b, 0) },
		"magic":      func(b []byte) []byte { b[0] = 'X'; return b },
		"version 2":  func(b []byte) []byte { b[4] = 2; return b },
		"unknown op": func(b []byte) []byte { b[6] = 9; return b },
		"op 0":       func(b []byte) []byte { b[6] = 0; return b },
	} {
		if _, err := ParseRequest(mutate(r.Marshal())); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseRequest error %v, want ErrMalformed", name, err)
		}
	}
}

func TestReplyAndDescriptorRoundTrip(t *testing.T) {
	rep := Reply{Status: StatusBadToken, Count: 0, Message: "not the fd_token of lease 7"}
	got, err := ParseReply(rep.Marshal())
	if err != nil || got != rep {
		t.Fatalf("ParseReply = %+v, %v", got, err)
	}
	long := Reply{Message: strings.Repeat("é", MaxMessage)} // 2 bytes a rune: cut at a boundary
	b := long.Marshal()
	if len(b) > ReplyHeader+MaxMessage {
		t.Fatalf("reply of %d bytes", len(b))
	}
	if got, err := ParseReply(b); err != nil || !strings.HasPrefix(long.Message, got.Message) || len(got.Message) != MaxMessage {
		t.Fatalf("long reply: %d bytes, %v", len(got.Message), err)
	}
	bad := rep.Marshal()
	bad[12]++ // length disagrees with the message
	if _, err := ParseReply(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("reply with a wrong length: %v", err)
	}
	d := DescriptorHeader{Handle: 3, Size: 1 << 40}
	db := d.Marshal()
	if len(db) != DescriptorSize || db[6] != kindDescriptor || db[8] != 3 {
		t.Fatalf("descriptor bytes % x", db)
	}
	if got, err := ParseDescriptor(db); err != nil || got != d {
		t.Fatalf("ParseDescriptor = %+v, %v", got, err)
	}
	db[6] = 0
	if _, err := ParseDescriptor(db); !errors.Is(err, ErrMalformed) {
		t.Errorf("descriptor of another kind: %v", err)
	}
	if Path("/run/w/GPU-1.sock") != "/run/w/GPU-1.sock.fd" {
		t.Errorf("Path = %q", Path("/run/w/GPU-1.sock"))
	}
}

// TestTakeoverAcksRoundTripAndRefuseOtherKinds: each message of the
// takeover exchange parses as itself only; a short message, another kind
// or a wrong magic is ErrMalformed.
func TestTakeoverAcksRoundTripAndRefuseOtherKinds(t *testing.T) {
	kinds := []AckKind{AckImported, AckReleased, AckServing}
	for _, k := range kinds {
		b := MarshalAck(k)
		if len(b) != AckSize || string(b[:4]) != Magic || b[6] != byte(k) {
			t.Fatalf("%s: % x", k, b)
		}
		for _, want := range kinds {
			err := ParseAck(b, want)
			if (err == nil) != (k == want) || (err != nil && !errors.Is(err, ErrMalformed)) {
				t.Errorf("ParseAck(%s, want %s) = %v", k, want, err)
			}
		}
		if err := ParseAck(b[:AckSize-1], k); !errors.Is(err, ErrMalformed) {
			t.Errorf("short %s: %v", k, err)
		}
		bad := append([]byte("XXXX"), b[4:]...)
		if err := ParseAck(bad, k); !errors.Is(err, ErrMalformed) {
			t.Errorf("bad magic %s: %v", k, err)
		}
	}
}
