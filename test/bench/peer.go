package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/wcache/wcache/sdk/fill"
	"github.com/wcache/wcache/test/benchreport"
)

// PeerResult is the peer scenario's figures (issue 26): a daemon on mock
// device 1 filled from its sibling on device 0, once a round, against a
// memcpy of as many bytes into fresh memory on the copy's stream count.
// Times and rates: copy (StartPhases load_ns: allocate and copy in the
// plugin), verify (peer_verify_ns; its rate counts the copy too), memcpy
// (rate); ratios copy and with_verify, each ÷ memcpy.
type PeerResult struct {
	Model Model `json:"model"`
	benchreport.Figures
}

const peerGoal = 0.8 // bounds the same-node peer fill's rate ÷ the fresh memcpy's

// runPeer serves the large checkpoint on device 0, then starts a daemon on device 1
// Repeats times (each must fill every byte from the peer), alternating with the memcpy.
func runPeer(ctx context.Context, e *Env) (any, []Target, error) {
	m, err := e.warmModel(e.largeFew())
	var s *server
	if err == nil {
		s, err = serving(ctx, e.Options, "peer", m, m)
	}
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	w := s.world
	w.UUIDs = append(w.UUIDs, w.UUID[:len(w.UUID)-1]+"1") // a second mock device
	w.Setenv("WCACHE_MOCK_DEVICES=" + strings.Join(w.UUIDs, ","))
	l, rates := laps{}, series{}
	err = e.rounds("peer", e.Repeats, func(int) (string, error) {
		d, err := w.startServe(ctx, 1, nil, "--model", m.Dir)
		if err != nil {
			return "", err
		}
		st, err := w.Status(ctx, w.UUIDs[1])
		if err == nil && (st.FilledFrom != "peer "+w.UUID || st.StartPhases.BytesFromPeer != m.Bytes) {
			err = fmt.Errorf("filled from %q (fallback %q), %d bytes from the peer; want all %d from %s",
				st.FilledFrom, st.FillFallback, st.StartPhases.BytesFromPeer, m.Bytes, w.UUID)
		}
		if err = errors.Join(d.withOutput(err), d.Stop()); err != nil {
			return "", err
		}
		p := st.StartPhases
		l["copy"], l["verify"] = append(l["copy"], p.Load), append(l["verify"], p.PeerVerify)
		rates.Add("copy", benchreport.GiBps(m.Bytes, p.Load))
		rates.Add("verify", benchreport.GiBps(m.Bytes, p.Load+p.PeerVerify))
		mc, err := freshMemcpy(e.ShmDir, int64(m.Bytes), fill.DefaultCopyStreams)
		rates.Add("memcpy", mc.rate())
		return fmt.Sprintf("copy %.2f GiB/s, memcpy %.2f GiB/s", benchreport.GiBps(m.Bytes, p.Load), mc.rate()), err
	})
	if err != nil {
		return nil, nil, err
	}
	res := &PeerResult{Model: *m, Figures: benchreport.FiguresOf(l, rates)}
	ratio, withVerify := res.Ratio("copy", "copy", "memcpy"), res.Ratio("with_verify", "verify", "memcpy")
	e.logf("peer: copy %.2f GiB/s, memcpy %.2f GiB/s: %.2f (%.2f with the check)", res.Rates["copy"], res.Rates["memcpy"], ratio, withVerify)
	return res, []Target{benchreport.AtLeast("same-node peer fill ÷ memcpy into fresh memory (mock)", ratio, peerGoal, "×")}, nil
}
