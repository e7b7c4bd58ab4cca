package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/sdk/filedigest"
)

// Defaults of FetchOptions.
const (
	DefaultStreams = 4
	// DefaultChunkBytes is the size of each range read (a multiple of the
	// content digest's leaf, so that each leaf is hashed whole by the
	// stream that read it).
	DefaultChunkBytes = 16 << 20
)

// FetchOptions configure Fetch.
type FetchOptions struct {
	Transport Transport
	// Peers are host:port entries (see ResolvePeers); Self the addresses
	// to leave out; Resolver looks names up (nil: net.DefaultResolver).
	Peers, Self []string
	Resolver    Resolver
	// Streams is the number of sessions reading in parallel (default
	// DefaultStreams).
	Streams int
	// ChunkBytes is the size of each range read, a multiple of
	// filedigest.LeafBytes (default DefaultChunkBytes).
	ChunkBytes uint64
	// Expect, when not nil, are the content digests the caller knows the
	// arenas must have (by arena): an offer that differs is refused
	// before a byte is read.
	Expect []string
	// MaxBytes, when not 0, refuses an offer of more bytes in all (the
	// daemon's memory budget) before the sink is prepared.
	MaxBytes uint64
	// Deadline, when not 0, bounds the whole fetch (peers asked, bytes
	// read, the sink committed): past it the fetch fails with an error
	// wrapping ErrFillDeadline, the sink aborted. 0: no deadline.
	Deadline time.Duration
	// MinRate, when not 0, is the rate (bytes per second) the fetch must
	// keep over each RateWindow (default DefaultRateWindow) from the
	// sink's Prepare until the last byte is stored: a window below it
	// fails the fetch with an error wrapping ErrFillTooSlow, the sink
	// aborted. Bytes count when the sink stored them, a chunk at a time
	// (ChunkBytes per stream), so MinRate × RateWindow should be several
	// times Streams × ChunkBytes. 0: no minimum.
	MinRate    uint64
	RateWindow time.Duration
	// Logger (nil: none) receives peers skipped and the fetch's outcome.
	Logger hclog.Logger
}

// FetchResult describes a committed fetch.
type FetchResult struct {
	Peer  string
	Offer Offer
	Bytes uint64
	Wall  time.Duration
}

// Fetch asks the peers, in order, for identity until one offers it
// (ErrNotHeld and unreachable peers are skipped), then reads the offer's
// arenas from that peer on Streams parallel sessions into sink, hashing
// every leaf as it arrives, and checks each arena's content digest
// against the offer (and Expect). Only when every byte arrived and every
// digest matched is sink committed; on any failure after Prepare — a peer
// that dies mid-stream, a digest mismatch (*DigestMismatchError), ctx's
// end — sink is aborted and the error returned, and the caller reads the
// files instead. A fetch past opts.Deadline, or slower than opts.MinRate,
// is such a failure (ErrFillDeadline, ErrFillTooSlow: fillwatch.go).
func Fetch(ctx context.Context, identity string, sink Sink, opts FetchOptions) (FetchResult, error) {
	if opts.Transport == nil || sink == nil {
		return FetchResult{}, errors.New("peer fetch: a transport and a sink are required")
	}
	ctx, w := newFillWatch(ctx, opts)
	defer w.stop()
	res, err := fetch(ctx, identity, w.wrap(sink), opts)
	return res, w.explain(err)
}

func fetch(ctx context.Context, identity string, sink Sink, opts FetchOptions) (FetchResult, error) {
	defaults.Positive(&opts.Streams, DefaultStreams)
	defaults.Zero(&opts.ChunkBytes, DefaultChunkBytes)
	if opts.ChunkBytes%filedigest.LeafBytes != 0 {
		return FetchResult{}, fmt.Errorf("peer fetch: chunk of %d bytes is not a multiple of %d", opts.ChunkBytes, filedigest.LeafBytes)
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	peers, err := ResolvePeers(ctx, opts.Resolver, opts.Peers, opts.Self)
	if err != nil {
		return FetchResult{}, err
	}
	peer, offer, err := findOffer(ctx, opts.Transport, peers, identity, log)
	if err != nil {
		return FetchResult{}, err
	}
	if err := checkOffer(peer, offer, identity, opts.Expect); err != nil {
		return FetchResult{}, err
	}
	if opts.MaxBytes != 0 && offer.Bytes() > opts.MaxBytes {
		return FetchResult{}, fmt.Errorf("peer %s offers %d bytes, more than the %d allowed", peer, offer.Bytes(), opts.MaxBytes)
	}
	start := time.Now()
	if err := sink.Prepare(ctx, offer); err != nil {
		return FetchResult{}, fmt.Errorf("peer fetch: prepare the sink: %w", err)
	}
	if err := copyOffer(ctx, opts, peer, offer, sink); err != nil {
		sink.Abort(err)
		log.Warn("peer fetch failed", "peer", peer, "identity", identity, "error", err)
		return FetchResult{}, err
	}
	if err := sink.Commit(ctx); err != nil {
		return FetchResult{}, fmt.Errorf("peer fetch: commit: %w", err)
	}
	res := FetchResult{Peer: peer, Offer: offer, Bytes: offer.Bytes(), Wall: time.Since(start)}
	log.Info("filled from peer", "peer", peer, "identity", identity, "bytes", res.Bytes, "wall", res.Wall)
	return res, nil
}

// findOffer returns the first peer that offers identity.
func findOffer(ctx context.Context, t Transport, peers []string, identity string, log hclog.Logger) (string, Offer, error) {
	var errs []error
	for _, p := range peers {
		offer, err := t.Describe(ctx, p, identity)
		if err == nil {
			return p, offer, nil
		}
		if ctx.Err() != nil {
			return "", Offer{}, ctx.Err()
		}
		log.Debug("peer skipped", "peer", p, "error", err)
		errs = append(errs, err)
	}
	return "", Offer{}, fmt.Errorf("%w: identity %s: %w", ErrNoPeer, identity, errors.Join(errs...))
}

// checkOffer refuses an offer for another identity, without arenas, with
// a digest that is not a content digest, or that differs from expect.
func checkOffer(peer string, o Offer, identity string, expect []string) error {
	if o.Identity != identity {
		return fmt.Errorf("peer %s offered identity %s for %s: protocol violation", peer, o.Identity, identity)
	}
	if len(o.Arenas) == 0 {
		return fmt.Errorf("peer %s offered no arena: protocol violation", peer)
	}
	if expect != nil && len(expect) != len(o.Arenas) {
		return &DigestMismatchError{Peer: peer, Arena: -1, Want: fmt.Sprintf("%d arenas", len(expect)), Got: fmt.Sprintf("%d arenas", len(o.Arenas))}
	}
	for i, a := range o.Arenas {
		if _, err := filedigest.AlgorithmOf(a.Digest); err != nil {
			return fmt.Errorf("peer %s: arena %d: %w: protocol violation", peer, i, err)
		}
		if expect != nil && expect[i] != a.Digest {
			return &DigestMismatchError{Peer: peer, Arena: i, Want: expect[i], Got: a.Digest}
		}
	}
	return nil
}

// chunk is one range to read.
type chunk struct {
	arena     int
	off, size uint64
}

// copyOffer reads every arena on opts.Streams sessions and checks the
// digests; the first error stops every stream.
func copyOffer(ctx context.Context, opts FetchOptions, peer string, offer Offer, sink Sink) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var chunks []chunk
	leaves := make([][]filedigest.Sum, len(offer.Arenas))
	// Each arena's leaves are hashed in its digest's algorithm (checkOffer
	// accepted only known ones): a peer of an older build offers
	// SHA256Tree digests.
	algs := make([]filedigest.Algorithm, len(offer.Arenas))
	for i, a := range offer.Arenas {
		algs[i], _ = filedigest.AlgorithmOf(a.Digest)
		leaves[i] = make([]filedigest.Sum, filedigest.LeafCount(int64(a.Size)))
		for off := uint64(0); off < a.Size; off += opts.ChunkBytes {
			chunks = append(chunks, chunk{arena: i, off: off, size: min(opts.ChunkBytes, a.Size-off)})
		}
	}
	work := make(chan chunk)
	var wg sync.WaitGroup
	for range min(opts.Streams, len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := readStream(ctx, opts, peer, offer, sink, work, algs, leaves); err != nil {
				cancel(err)
			}
		}()
	}
feed:
	for _, c := range chunks {
		select {
		case work <- c:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	for i, a := range offer.Arenas {
		got, err := algs[i].Root(int64(a.Size), leaves[i])
		if err != nil {
			return err
		}
		if got != a.Digest {
			return &DigestMismatchError{Peer: peer, Arena: i, Want: a.Digest, Got: got}
		}
	}
	return nil
}

// readStream is one session: it reads the chunks it takes into its own
// buffer, hashes their leaves and writes them to the sink.
func readStream(ctx context.Context, opts FetchOptions, peer string, offer Offer, sink Sink, work <-chan chunk, algs []filedigest.Algorithm, leaves [][]filedigest.Sum) error {
	s, err := opts.Transport.Open(ctx, peer, offer)
	if err != nil {
		return err
	}
	defer s.Close()
	buf := make([]byte, opts.ChunkBytes)
	for c := range work {
		p := buf[:c.size]
		if err := s.ReadRange(ctx, c.arena, c.off, p); err != nil {
			return err
		}
		first := int64(c.off / filedigest.LeafBytes)
		for j := int64(0); j*filedigest.LeafBytes < int64(len(p)); j++ {
			lo := j * filedigest.LeafBytes
			leaves[c.arena][first+j] = algs[c.arena].Leaf(p[lo:min(int64(len(p)), lo+filedigest.LeafBytes)])
		}
		if err := sink.WriteAt(c.arena, p, c.off); err != nil {
			return fmt.Errorf("peer fetch: write arena %d at %d: %w", c.arena, c.off, err)
		}
	}
	return nil
}
