package cli

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/peer"
)

// reloadSignal makes serve read its peer credentials again (SIGHUP is
// taken: it drains the daemon, as a closed terminal should).
const reloadSignal = syscall.SIGUSR1

// watchPeerReload reads and checks --peer-cert, --peer-key and --peer-ca
// again (peer.Credentials.Reload: the same safe-place checks as at start)
// at each SIGUSR1, until the returned function is called. A reload that
// fails is logged at error and keeps the credentials in use. Without
// credentials (no --peer-listen or --peers) SIGUSR1 is ignored rather
// than left to end the daemon.
func watchPeerReload(creds *peer.Credentials, log hclog.Logger) (stop func()) {
	if creds == nil {
		signal.Ignore(reloadSignal)
		return func() {}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, reloadSignal)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ch:
			}
			if err := creds.Reload(); err != nil {
				log.Error("peer credentials not reloaded: keeping those in use", "signal", "SIGUSR1", "error", err)
				continue
			}
			log.Info("peer credentials reloaded", "signal", "SIGUSR1", "cert", creds.CertFile, "key", creds.KeyFile, "ca", creds.CAFile)
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
