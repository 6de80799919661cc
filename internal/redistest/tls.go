package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// StartTLS starts a redis-server of the test's own that speaks only TLS on a
// free loopback port (no plain port), with a certificate for 127.0.0.1 and
// localhost from a CA made for the test, and client certificates not
// required (as most managed Redis). It returns the server, whose TLS field
// trusts the CA, and the CA alone, for the test's own clients. It is stopped
// at the end of the test. Without a redis-server, or with one built without
// TLS, it skips the test, or fails it in CI.
func StartTLS(tb testing.TB, extraArgs ...string) (*Server, *x509.CertPool) {
	tb.Helper()
	dir := tb.TempDir()
	pool, err := writeCerts(dir)
	if err != nil {
		tb.Fatalf("redistest: certificates: %v", err)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	s, err := startServer(cfg, func(port string) []string {
		return []string{"--port", "0", "--tls-port", port,
			"--tls-cert-file", filepath.Join(dir, "server.pem"),
			"--tls-key-file", filepath.Join(dir, "server.key"),
			"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
			"--tls-auth-clients", "no"}
	}, extraArgs)
	if err != nil {
		if InCI() {
			tb.Fatalf("redistest: CI is set but redis-server with TLS could not be started: %v", err)
		}
		tb.Skipf("needs a redis-server built with TLS (--tls-port) on PATH: %v", err)
	}
	tb.Cleanup(s.Close)
	return s, pool
}

// writeCerts writes ca.pem, server.pem and server.key into dir.
func writeCerts(dir string) (*x509.CertPool, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: leafDER},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, nil
}
