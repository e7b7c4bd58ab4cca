package bench

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/internal/parallel"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/test/benchreport"
	"github.com/wcache/wcache/test/netns"
)

// PeerFillResult is the cross-node fill (issue 26): daemon B filled from
// daemon A over a veth pair between two network namespaces (mutual TLS,
// every leaf hashed, digests checked; the copy's time from B's Status)
// against one plain TCP stream of as many bytes over the same pair, GiB/s,
// alternating: rates fill and tcp, ratio fill (÷ tcp). NotMeasured says
// why there is no figure (not root).
type PeerFillResult struct {
	Model       Model  `json:"model"`
	NotMeasured string `json:"not_measured,omitempty"`
	benchreport.Figures
}

func runPeerFill(ctx context.Context, e *Env) (any, []Target, error) {
	m, err := e.Model(e.largeFew())
	if err != nil {
		return nil, nil, err
	}
	pair, del, err := netns.Make(e.logf)
	if err != nil {
		return &PeerFillResult{Model: *m, NotMeasured: err.Error()}, nil, nil
	}
	defer del()
	ca, err := peertest.MakeCA("bench CA")
	if err != nil {
		return nil, nil, err
	}
	peerAt := pair.A.Addr.String() + ":7450"
	wA, err := serveIn(ctx, e, ca, pair.A, m, "--peer-listen", peerAt)
	if err != nil {
		return nil, nil, err
	}
	defer wA.Close()
	plain, err := pair.A.Listen("tcp", pair.A.Addr.String()+":0")
	if err != nil {
		return nil, nil, err
	}
	defer plain.Close()
	go peertest.ServePlain(plain, zeros(m.Bytes)...)
	rates := series{}
	err = e.rounds("peerfill", e.Repeats, func(int) (string, error) {
		start := time.Now()
		c, err := pair.B.DialContext(ctx, "tcp", plain.Addr().String())
		if err == nil {
			_, err = io.CopyN(io.Discard, c, int64(m.Bytes))
			c.Close()
		}
		if err != nil {
			return "", fmt.Errorf("plain TCP: %w", err)
		}
		rates.Add("tcp", benchreport.GiBps(m.Bytes, time.Since(start)))
		w, err := serveIn(ctx, e, ca, pair.B, m, "--peers", peerAt)
		if err != nil {
			return "", err
		}
		defer w.Close()
		st, err := w.status(ctx)
		if err == nil && (!strings.HasPrefix(st.FilledFrom, "peer ") || st.StartPhases.BytesFromPeer != m.Bytes) {
			err = fmt.Errorf("daemon B filled from %q (%d bytes from a peer), fallback %q", st.FilledFrom, st.StartPhases.BytesFromPeer, st.FillFallback)
		}
		if err != nil {
			return "", err
		}
		rates.Add("fill", benchreport.GiBps(m.Bytes, st.StartPhases.Load))
		probe := min(m.Bytes, cpuProbeBytes)
		start = time.Now()
		if err := fillCPUWork(probe, peer.DefaultStreams); err != nil {
			return "", err
		}
		rates.Add("cpu", benchreport.GiBps(probe, time.Since(start)))
		return fmt.Sprintf("fill %.2f GiB/s, plain TCP %.2f GiB/s, the fill's cipher and digest alone %.2f GiB/s",
			rates.Last("fill"), rates.Last("tcp"), rates.Last("cpu")), nil
	})
	if err != nil {
		return nil, nil, err
	}
	res := &PeerFillResult{Model: *m, Figures: benchreport.FiguresOf(nil, rates)}
	return res, []Target{
		benchreport.AtLeast("cross-node fill ÷ plain TCP over a veth pair", res.Ratio("fill", "fill", "tcp"), 0.8, "×"),
		benchreport.Reported("bound: the fill's cipher and digest work alone, no network, no copies (TLS seal and open, BLAKE3 leaves) ÷ plain TCP",
			res.Ratio("cpu", "cpu", "tcp"), "×"),
	}, nil
}

// cpuProbeBytes is how many bytes fillCPUWork processes a round at most
// (the checkpoint's size when smaller).
const cpuProbeBytes = 1 << 30

// fillCPUWork does, on streams goroutines and without a network, the
// cipher and digest work a cross-node fill does for total bytes on its two
// ends: each 16 KiB TLS record sealed and opened with AES-128-GCM (TLS
// 1.3's first choice where the CPU has AES instructions) and each 1 MiB
// leaf hashed in the content digest's Default algorithm, over one buffer
// that stays in cache. Both daemons of the scenario run on this machine,
// so the fill cannot beat this rate; it says whether the cipher and digest
// are what holds the fill back, not what the copies cost.
func fillCPUWork(total uint64, streams int) error {
	const record = 16 << 10
	block, err := aes.NewCipher(make([]byte, 16))
	if err != nil {
		return err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return err
	}
	leaves := int((total + filedigest.LeafBytes - 1) / filedigest.LeafBytes)
	type scratch struct{ leaf, sealed, nonce []byte }
	bufs := make([]*scratch, streams)
	return parallel.For(context.Background(), leaves, streams, func(w, n int) error {
		if bufs[w] == nil {
			bufs[w] = &scratch{leaf: make([]byte, filedigest.LeafBytes), sealed: make([]byte, 0, record+aead.Overhead()),
				nonce: make([]byte, aead.NonceSize())}
		}
		b := bufs[w]
		for off := 0; off < len(b.leaf); off += record {
			binary.LittleEndian.PutUint64(b.nonce, uint64(n)<<32|uint64(off))
			b.sealed = aead.Seal(b.sealed[:0], b.nonce, b.leaf[off:off+record], nil)
			if _, err := aead.Open(b.leaf[off:off], b.nonce, b.sealed, nil); err != nil {
				return err
			}
		}
		filedigest.Default.Leaf(b.leaf)
		return nil
	})
}

// serveIn starts `wcache serve --model m args…` with certificates of ca in
// host h, in a world of its own, and waits until it is ready.
func serveIn(ctx context.Context, e *Env, ca *peertest.CA, h *netns.Host, m *Model, args ...string) (*world, error) {
	w, err := newWorld(e.Options, "peer", m)
	if err != nil {
		return nil, err
	}
	creds, err := ca.IssueIn(w.Root, "node", ca)
	if err == nil {
		w.via = h.Start
		w.Setenv("XDG_CACHE_HOME=" + filepath.Join(w.Root, "cache"))
		_, err = w.startServe(ctx, 0, nil, append(args, "--model", m.Dir,
			"--peer-cert", creds.CertFile, "--peer-key", creds.KeyFile, "--peer-ca", creds.CAFile)...)
	}
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

// zeros is n zero bytes as slices of one 4 MiB buffer (the plain stream
// sends them without holding n bytes).
func zeros(n uint64) (bufs [][]byte) {
	buf := make([]byte, 4<<20)
	for ; n > 0; n -= uint64(len(bufs[len(bufs)-1])) {
		bufs = append(bufs, buf[:min(uint64(len(buf)), n)])
	}
	return bufs
}
