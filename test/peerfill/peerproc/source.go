package main

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/wcache/wcache/core/peer"
)

// source serves one generation under one identity.
type source struct {
	identity string
	gen      *generation
}

func (s source) Open(_ context.Context, identity string) (peer.Generation, error) {
	if identity != s.identity {
		return nil, fmt.Errorf("identity %s: %w", identity, peer.ErrNotHeld)
	}
	return s.gen, nil
}

// generation is the files' bytes in memory with their digests.
type generation struct {
	data   [][]byte
	arenas []peer.Arena
	// pauseAt >= 0: a read reaching this offset of arena 0 prints
	// "paused at N" (once) to out and waits for the server to close.
	pauseAt int64
	out     io.Writer
	once    sync.Once
}

func (g *generation) ID() string           { return "peerproc-1" }
func (g *generation) Arenas() []peer.Arena { return g.arenas }
func (g *generation) Release()             {}

func (g *generation) ReadAt(ctx context.Context, arena int, p []byte, off uint64) error {
	if g.pauseAt >= 0 && arena == 0 && off+uint64(len(p)) > uint64(g.pauseAt) {
		g.once.Do(func() { fmt.Fprintf(g.out, "paused at %d\n", g.pauseAt) })
		<-ctx.Done()
		return ctx.Err()
	}
	copy(p, g.data[arena][off:])
	return nil
}
