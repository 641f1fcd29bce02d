package redis

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// writeTestCA writes a CA and a server certificate for 127.0.0.1 signed by
// it into dir, returning the file paths.
func writeTestCA(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "precog test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

var (
	tlsCAOnce sync.Once
	tlsCA     struct{ ca, cert, key string }
)

// TestTLS talks to a redis-server over TLS, verifying its certificate
// against the system roots (here SSL_CERT_FILE, as a deployment would
// configure them). Not parallel: it sets the environment before the
// process first loads the system roots.
func TestTLS(t *testing.T) {
	ctx := context.Background()
	// Go loads the system roots once per process, so every run of this test
	// in one process (-count=N) must use the same CA.
	tlsCAOnce.Do(func() {
		dir, err := os.MkdirTemp("", "precog-tls-")
		if err != nil {
			t.Fatal(err)
		}
		tlsCA.ca, tlsCA.cert, tlsCA.key = writeTestCA(t, dir)
	})
	caFile, certFile, keyFile := tlsCA.ca, tlsCA.cert, tlsCA.key
	if caFile == "" {
		t.Fatal("no test CA")
	}
	t.Setenv("SSL_CERT_FILE", caFile)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	rs := testservers.NewRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s, err := New(jobs.RedisSinkSpec{Addr: tlsAddr, TLS: true, Namespace: "tls", TTL: jobs.Duration{Duration: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := testRun("v1")
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatalf("prepare over TLS: %v", err)
	}
	if err := writeShard(ctx, s, run, 0, 0, 1000, 100, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, rs.Client(t), "tls", run, 1000, 3)

	// TLS against the plain port fails clearly, within the timeout.
	plain, err := New(jobs.RedisSinkSpec{Addr: rs.Addr, TLS: true, Namespace: "tls", Timeout: jobs.Duration{Duration: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Prepare(ctx, run); err == nil {
		t.Fatal("TLS handshake with a plain-text port succeeded")
	}
}
