package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/sdk/filedigest"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// run parses args, loads the arenas and serves until SIGTERM or SIGINT.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peerproc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var arenas listFlag
	listen := fs.String("listen", "", "address of the mTLS peer server (host:port)")
	plain := fs.String("plain-listen", "", "address of a plain TCP server that streams the arenas' bytes to each connection (benchmarks)")
	cert := fs.String("cert", "", "PEM certificate chain")
	key := fs.String("key", "", "PEM private key")
	ca := fs.String("ca", "", "PEM bundle of the CA whose peers are trusted")
	identity := fs.String("identity", "", "weights identity served")
	announce := fs.String("announce", "", "comma-separated content digests to announce instead of the arenas' own (a lying peer)")
	pauseAt := fs.Int64("pause-at", -1, "hold the read that reaches this offset of arena 0 until killed (-1: never)")
	fs.Var(&arenas, "arena", "file whose bytes are one arena (repeatable, in order)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" || *identity == "" || len(arenas) == 0 {
		return errors.New("-listen, -identity and at least one -arena are required")
	}
	gen, err := loadGeneration(arenas, *pauseAt, stdout)
	if err != nil {
		return err
	}
	if *announce != "" {
		ds := strings.Split(*announce, ",")
		if len(ds) != len(gen.arenas) {
			return fmt.Errorf("-announce has %d digests for %d arenas", len(ds), len(gen.arenas))
		}
		for i := range gen.arenas {
			gen.arenas[i].Digest = ds[i]
		}
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "peerproc", Output: stderr, Level: hclog.Info})
	creds := &peer.Credentials{CertFile: *cert, KeyFile: *key, CAFile: *ca}
	srv, err := peer.NewServer(source{identity: *identity, gen: gen}, creds, peer.ServerOptions{Logger: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(l) }()
	if *plain != "" {
		pl, err := net.Listen("tcp", *plain)
		if err != nil {
			return err
		}
		defer pl.Close()
		go peertest.ServePlain(pl, gen.data...)
		fmt.Fprintf(stdout, "plain listening on %s\n", pl.Addr())
	}
	fmt.Fprintf(stdout, "peer listening on %s\n", l.Addr())
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errc:
		return err
	}
}

// loadGeneration reads the files into memory and records their content
// digests once, as a daemon does at load.
func loadGeneration(paths []string, pauseAt int64, stdout io.Writer) (*generation, error) {
	g := &generation{pauseAt: pauseAt, out: stdout}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		g.data = append(g.data, b)
		g.arenas = append(g.arenas, peer.Arena{Size: uint64(len(b)), Digest: filedigest.Bytes(b)})
	}
	return g, nil
}
