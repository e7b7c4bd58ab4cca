package peertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/peer"
)

// CA is a certificate authority made for one test: a self-signed P-256
// certificate valid from an hour ago to an hour from now.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate, the bundle a peer that trusts it reads.
	PEM []byte
}

// NewCA makes a CA whose common name is name; a failure fails t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	c, err := MakeCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MakeCA is NewCA for a caller without a testing.TB (the benchmark
// runner).
func MakeCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue signs a leaf certificate for name (its common name, and the URI
// SAN spiffe://test/<name>), usable for both server and client auth, and
// writes it, its key and the CA bundle of trust (the CA whose peers the
// holder accepts: c itself, or another one to make a misconfigured peer)
// into a new folder of t.TempDir(), as tls.crt, tls.key and ca.crt (mode
// 0600). It returns the credentials that read those files.
func (c *CA) Issue(t testing.TB, name string, trust *CA) *peer.Credentials {
	t.Helper()
	cr, err := c.IssueIn(t.TempDir(), name, trust)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// IssueCN is Issue of a certificate that names name as its common name
// only, with no subject alternative name (as older PKIs issue them).
func (c *CA) IssueCN(t testing.TB, name string, trust *CA) *peer.Credentials {
	t.Helper()
	cr, err := c.issueIn(t.TempDir(), name, trust, false)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// IssueIn is Issue writing into the existing folder dir.
func (c *CA) IssueIn(dir, name string, trust *CA) (*peer.Credentials, error) {
	return c.issueIn(dir, name, trust, true)
}

func (c *CA) issueIn(dir, name string, trust *CA, san bool) (*peer.Credentials, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, err
	}
	u, err := url.Parse("spiffe://test/" + name)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if san {
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cr := &peer.Credentials{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CAFile: filepath.Join(dir, "ca.crt")}
	for path, data := range map[string][]byte{
		cr.CertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		cr.KeyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		cr.CAFile:   trust.PEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return cr, nil
}
