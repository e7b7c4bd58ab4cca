package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/sdk/names"
)

// descriptorHandles counts the descriptor handles of hs.
func descriptorHandles(hs []Handle) int {
	n := 0
	for _, h := range hs {
		if h.IsDescriptor() {
			n++
		}
	}
	return n
}

// fetchDescriptors receives the descriptors of hs's descriptor handles on
// the daemon's descriptor channel (op, id and token from the manifest or
// plan) and sets each handle's File. The daemon must send exactly one
// descriptor per descriptor handle, of the handle's size, and nothing for
// name handles: anything else is ErrBadManifest and nothing is kept. The
// returned files are the caller's to close (closeHandleFiles). early, when
// not nil, is the attach's ATTACH_WAIT request (awaitDescriptors), whose
// answer is taken first; if it fails (a daemon older than the op refuses
// it as malformed; the connection failed), the request goes with op as
// before.
func (c *Client) fetchDescriptors(ctx context.Context, op fdchannel.Op, id uint64, token []byte, hs []Handle, early *fdchannel.Waiting) ([]*os.File, error) {
	var got []fdchannel.Descriptor
	var err error
	answered := false
	if early != nil {
		got, err = early.Receive(earlyAnswerWait)
		answered = err == nil
		var refused *fdchannel.RefusedError
		if errors.As(err, &refused) && refused.Status == fdchannel.StatusBadRequest {
			c.noAttachWait.Store(true)
		}
	}
	if !answered {
		if len(token) != fdchannel.TokenSize {
			return nil, fmt.Errorf("descriptor handles without a %d-byte fd_token (got %d bytes): %w", fdchannel.TokenSize, len(token), ErrBadManifest)
		}
		req := fdchannel.Request{Op: op, ID: id}
		copy(req.Token[:], token)
		if got, err = fdchannel.Fetch(ctx, fdchannel.Path(c.socket), req); err != nil {
			return nil, err
		}
	}
	files := make([]*os.File, 0, len(got))
	seen := make(map[uint32]bool, len(got))
	for _, d := range got {
		files = append(files, d.File)
		switch {
		case int(d.Handle) >= len(hs) || !hs[d.Handle].IsDescriptor():
			err = fmt.Errorf("descriptor channel sent a descriptor for handle %d, which is not a descriptor handle: %w", d.Handle, ErrBadManifest)
		case seen[d.Handle]:
			err = fmt.Errorf("descriptor channel sent handle %d twice: %w", d.Handle, ErrBadManifest)
		case d.Size != hs[d.Handle].Size:
			err = fmt.Errorf("descriptor of handle %d: %d bytes, the manifest says %d: %w", d.Handle, d.Size, hs[d.Handle].Size, ErrBadManifest)
		}
		if err != nil {
			closeHandleFiles(files)
			return nil, err
		}
		seen[d.Handle] = true
	}
	if want := descriptorHandles(hs); len(got) != want {
		closeHandleFiles(files)
		return nil, fmt.Errorf("descriptor channel sent %d descriptors for %d descriptor handles: %w", len(got), want, ErrBadManifest)
	}
	for _, d := range got {
		hs[d.Handle].File = d.File
	}
	return files, nil
}

// earlyAnswerWait bounds the wait, once the manifest arrived, for the
// answer to an ATTACH_WAIT request (fdchannel.Waiting.Receive): the daemon
// answered before it sent the manifest, so past this the request went
// astray and op LEASE is quicker.
const earlyAnswerWait = time.Second

// awaitDescriptors sends op ATTACH_WAIT on the descriptor channel before an
// Attach (early: the caller may; a resumed lease's Attach waits for a
// successor, longer than the daemon keeps the request) and returns it with
// the token for AttachRequest.fd_wait_token: the daemon then sends the
// lease's descriptors while the manifest travels, instead of in an
// exchange after it. Nil when the attach is not expected to bring
// descriptors (the caller maps no descriptor kind, or this daemon's last
// manifest had none), the daemon refused the op before (older than it), or
// the request could not be sent: the descriptors are then fetched after
// the manifest, as before. A wrong guess costs a connection, never a result.
func (c *Client) awaitDescriptors(ctx context.Context, early bool) (*fdchannel.Waiting, []byte) {
	if !early || c.noDescriptors.Load() || c.noAttachWait.Load() || !mapsDescriptors(c.kinds) {
		return nil, nil
	}
	var token [fdchannel.TokenSize]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, nil
	}
	w, err := fdchannel.Await(ctx, fdchannel.Path(c.socket), token)
	if err != nil {
		return nil, nil
	}
	return w, token[:]
}

// mapsDescriptors reports whether a client that said kinds may be served
// descriptor handles (no kinds: the daemon chooses).
func mapsDescriptors(kinds []string) bool {
	if len(kinds) == 0 {
		return true
	}
	for _, k := range kinds {
		if (Handle{Kind: k}).IsDescriptor() {
			return true
		}
	}
	return false
}

// closeHandleFiles closes descriptors received for handles.
func closeHandleFiles(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// MapFile maps size bytes of a descriptor (a memfd handle's File)
// copy-on-write, as MapShm does: a write to the bytes stays this
// process's. The descriptor may be closed afterwards: the mapping keeps the
// memory until Unmap. A size of 0 maps nothing.
func MapFile(f *os.File, size uint64) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("map descriptor: stat: %w", err)
	}
	if uint64(st.Size) < size {
		return nil, fmt.Errorf("map descriptor: it has %d bytes, the handle %d: %w", st.Size, size, ErrBadManifest)
	}
	data, err := mmap.FD(int(f.Fd()), size, mmap.CopyOnWrite)
	if err != nil {
		return nil, fmt.Errorf("map descriptor: %w", err)
	}
	return data, nil
}

// mapWritableFile maps a writable descriptor (a publish plan's memfd) for
// writing.
func mapWritableFile(f *os.File, size uint64) ([]byte, error) {
	data, err := mmap.FD(int(f.Fd()), size, mmap.ReadWrite)
	if err != nil {
		return nil, fmt.Errorf("map descriptor for writing: %w", err)
	}
	return data, nil
}

// MapHandle maps handle i of a manifest copy-on-write: a posix-shm file,
// or a memfd's descriptor. Other kinds are a *NotMappableError.
func MapHandle(i int, h Handle) ([]byte, error) {
	switch {
	case h.Kind == names.KindPosixShm:
		return MapShm(string(h.Data), h.Size)
	case h.Kind == names.KindMemfd && h.File != nil:
		return MapFile(h.File, h.Size)
	case h.Kind == names.KindMemfd:
		return nil, fmt.Errorf("memfd handle %d has no descriptor (attach receives it; a hand-built manifest must set File): %w", i, ErrBadManifest)
	}
	return nil, &NotMappableError{Handle: i, Kind: h.Kind}
}

// mappable reports whether this process maps handles of kind itself.
func mappable(kind string) bool { return kind == names.KindPosixShm || kind == names.KindMemfd }
