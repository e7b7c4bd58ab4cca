package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Credentials are this daemon's mutual-TLS identity, read from files as
// cert-manager or SPIFFE (spiffe-helper) write them: a PEM certificate
// chain, its PEM private key, and the PEM bundle of the CA(s) whose peers
// are trusted. The files are read again when any of them changes (size,
// mtime, ctime or inode; checked at each new connection), so a rotated
// certificate is used without a restart; a rotation that fails to load
// keeps the previous credentials and is reported by the next handshake's
// error only if there were none.
//
// Peers are authenticated by their chain to the CA, not by host name
// (peers are often dialled by IP, from a DNS name resolving to many):
// both sides require a certificate that verifies against CAFile, for
// client and server use respectively. AllowedNames narrows that further.
type Credentials struct {
	CertFile, KeyFile, CAFile string
	// AllowedNames, when not empty, requires the peer's leaf certificate
	// to carry one of these names as a DNS or URI SAN (a SPIFFE ID such as
	// spiffe://cluster.local/ns/ai/sa/wcache) or as its common name.
	AllowedNames []string

	mu     sync.Mutex
	loaded *loadedCreds
}

type loadedCreds struct {
	stamp []fileStamp
	cert  tls.Certificate
	pool  *x509.CertPool
}

// fileStamp identifies a file's version.
type fileStamp struct {
	ino, size   uint64
	mtime, ctim time.Time
}

func stamp(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{size: uint64(st.Size()), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
		s.ctim = time.Unix(sys.Ctim.Sec, sys.Ctim.Nsec)
	}
	return s, nil
}

// current returns the loaded credentials, reloading them when a file
// changed.
func (c *Credentials) current() (*loadedCreds, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stamps []fileStamp
	var statErr error
	for _, p := range []string{c.CertFile, c.KeyFile, c.CAFile} {
		s, err := stamp(p)
		if err != nil {
			statErr = fmt.Errorf("peer credentials: %w", err)
			break
		}
		stamps = append(stamps, s)
	}
	if statErr == nil && c.loaded != nil && slices.Equal(stamps, c.loaded.stamp) {
		return c.loaded, nil
	}
	l, err := c.load()
	if statErr != nil {
		err = statErr
	}
	if err != nil {
		if c.loaded != nil {
			return c.loaded, nil // keep serving with the previous ones
		}
		return nil, err
	}
	l.stamp = stamps
	c.loaded = l
	return l, nil
}

func (c *Credentials) load() (*loadedCreds, error) {
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return nil, errors.New("peer credentials: a certificate, a key and a CA file are all required")
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("peer credentials: %s holds no PEM certificate", c.CAFile)
	}
	return &loadedCreds{cert: cert, pool: pool}, nil
}

// Check loads the files once, so that a bad path or key is reported at
// start rather than at the first connection.
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
	leaf := cs.PeerCertificates[0]
	names := append(slices.Clone(leaf.DNSNames), leaf.Subject.CommonName)
	for _, u := range leaf.URIs {
		names = append(names, u.String())
	}
	for _, n := range names {
		if slices.Contains(c.AllowedNames, n) {
			return nil
		}
	}
	return fmt.Errorf("peer certificate names %v: none is allowed (%v)", names, c.AllowedNames)
}
