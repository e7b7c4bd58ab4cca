package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/wcache/wcache/core/safefile"
)

// Credentials are this daemon's mutual-TLS identity, read from files as
// cert-manager or SPIFFE (spiffe-helper) write them: a PEM certificate
// chain, its PEM private key, and the PEM bundle of the CA(s) whose peers
// are trusted.
//
// The files are trust anchors, so they are read only from safe places
// (core/safefile, the check plugins pass): each owned by the daemon's user
// or root, not writable by group or others, every directory on its way
// (symbolic links' included) owned by that user or root and not writable
// by others unless sticky; the key, besides, not readable by others, nor
// by its group unless root owns it and the daemon is not root. They are
// read once, by Check (NewServer and the daemon's start call it), and
// again only when Reload is called (serve: on SIGUSR1), which checks them
// again; a file changed on disk is not read meanwhile, so whoever could
// swap a file between two reloads gains nothing before the next one, and
// a rotation takes effect at the reload its writer signals.
//
// Peers are authenticated by their chain to the CA, not by host name
// (peers are often dialled by IP, from a DNS name resolving to many):
// both sides require a certificate that verifies against CAFile, for
// client and server use respectively. AllowedNames narrows that further.
type Credentials struct {
	CertFile, KeyFile, CAFile string
	// AllowedNames, when not empty, requires the peer's leaf certificate
	// to carry one of these names: as a DNS or URI SAN (a SPIFFE ID such
	// as spiffe://cluster.local/ns/ai/sa/wcache) when the certificate has
	// subject alternative names, as its common name only when it has none
	// (the rule of crypto/x509's legacy host name check: a certificate
	// that lists SANs is named by them alone).
	AllowedNames []string

	mu     sync.Mutex
	loaded *loadedCreds
}

type loadedCreds struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// current returns the loaded credentials, loading them the first time.
func (c *Credentials) current() (*loadedCreds, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil {
		return c.loaded, nil
	}
	l, err := c.load()
	if err != nil {
		return nil, err
	}
	c.loaded = l
	return l, nil
}

// Reload reads and checks the files again and, when they pass, uses them
// for every connection from now on (those open keep theirs). A failure
// keeps the credentials loaded before and is returned (the caller logs
// it): a rotation half written, or a file swapped into an unsafe place,
// changes nothing.
func (c *Credentials) Reload() error {
	l, err := c.load()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.loaded = l
	c.mu.Unlock()
	return nil
}

// ErrUnsafeCredentials is wrapped by the error of a credentials file in an
// unsafe place (with the *safefile.UntrustedError naming the file or
// directory and its owner or mode).
var ErrUnsafeCredentials = errors.New("peer credentials in an unsafe place")

func (c *Credentials) load() (*loadedCreds, error) {
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return nil, errors.New("peer credentials: a certificate, a key and a CA file are all required")
	}
	uid := os.Geteuid()
	var certPEM, keyPEM, caPEM []byte
	for _, f := range []struct {
		what, path string
		rule       safefile.Rule
		into       *[]byte
	}{
		{"certificate", c.CertFile, safefile.Rule{}, &certPEM},
		{"private key", c.KeyFile, safefile.Rule{Secret: true}, &keyPEM},
		{"CA bundle", c.CAFile, safefile.Rule{}, &caPEM},
	} {
		real, _, err := safefile.Check(f.path, uid, f.rule)
		if errors.Is(err, safefile.ErrUntrusted) {
			return nil, fmt.Errorf("peer credentials: %s %s: %w: %w", f.what, f.path, ErrUnsafeCredentials, err)
		}
		if err != nil {
			return nil, fmt.Errorf("peer credentials: %s: %w", f.what, err)
		}
		if *f.into, err = os.ReadFile(real); err != nil {
			return nil, fmt.Errorf("peer credentials: %s: %w", f.what, err)
		}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %s, %s: %w", c.CertFile, c.KeyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("peer credentials: %s holds no PEM certificate", c.CAFile)
	}
	return &loadedCreds{cert: cert, pool: pool}, nil
}

// Check loads the files once, so that a bad path, key or place is
// reported at start rather than at the first connection.
func (c *Credentials) Check() error {
	_, err := c.current()
	return err
}

// ServerConfig is the TLS configuration of a Server: TLS 1.3, a client
// certificate required and verified against the CA, AllowedNames applied.
func (c *Credentials) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l, err := c.current()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				Certificates:     []tls.Certificate{l.cert},
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        l.pool,
				VerifyConnection: c.verifyNames,
			}, nil
		},
	}
}

// ClientConfig is the TLS configuration of a TCPTransport: TLS 1.3, this
// daemon's certificate presented, the server's chain verified against the
// CA (not its host name: see Credentials), AllowedNames applied.
func (c *Credentials) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			l, err := c.current()
			if err != nil {
				return nil, err
			}
			return &l.cert, nil
		},
		// The chain is verified in VerifyConnection, against the CA and
		// without a host name.
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyConnection: func(cs tls.ConnectionState) error {
			l, err := c.current()
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: l.pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("peer certificate: %w", err)
			}
			return c.verifyNames(cs)
		},
	}
}

// verifyNames applies AllowedNames to the peer's leaf certificate.
func (c *Credentials) verifyNames(cs tls.ConnectionState) error {
	if len(c.AllowedNames) == 0 {
		return nil
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("peer presented no certificate")
	}
	names := PeerNames(cs.PeerCertificates[0])
	for _, n := range names {
		if slices.Contains(c.AllowedNames, n) {
			return nil
		}
	}
	return fmt.Errorf("peer certificate names %v: none is allowed (%v)", names, c.AllowedNames)
}

// PeerNames are the names AllowedNames is matched against: the DNS and
// URI SANs of a certificate that has subject alternative names (of any
// kind: DNS, URI, IP, e-mail), its common name only when it has none.
func PeerNames(leaf *x509.Certificate) []string {
	names := slices.Clone(leaf.DNSNames)
	for _, u := range leaf.URIs {
		names = append(names, u.String())
	}
	if len(leaf.DNSNames)+len(leaf.URIs)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) == 0 && leaf.Subject.CommonName != "" {
		names = append(names, leaf.Subject.CommonName)
	}
	return names
}
