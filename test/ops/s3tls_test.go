package ops

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// writeCA makes a CA and a certificate it signs for 127.0.0.1, and writes
// ca.pem, cert.pem and key.pem into dir.
func writeCA(t *testing.T, dir string) (caPath, certPath, keyPath string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", leafDER), write("key.pem", "EC PRIVATE KEY", keyDER)
}

// TestPacksTLSCA: the pack store reaches an https:// S3 endpoint whose
// certificate a private CA signs when packs.tls_ca names that CA, and
// refuses the certificate without it (the negative control). The server is
// the real versitygw the S3 pack store tests use, with TLS on.
func TestPacksTLSCA(t *testing.T) {
	bin := cacheBin("versitygw-v1.8.0")
	if p := os.Getenv("SLUICE_S3SERVER"); p != "" {
		bin = p
	}
	if !isExec(bin) {
		t.Skipf("no S3 server binary at %s: run deploy/fetch-s3server.sh (make test does)", bin)
	}
	dir := t.TempDir()
	caPath, certPath, keyPath := writeCA(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	data, iam := filepath.Join(dir, "data"), filepath.Join(dir, "iam")
	for _, d := range []string{data, iam} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "--port", addr, "--cert", certPath, "--key", keyPath, "--iam-dir", iam, "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY=sluicetls", "ROOT_SECRET_KEY=sluice-tls-secret")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	// Wait until it answers TLS (retry until, polling the child's port).
	pool := x509.NewCertPool()
	pemCA, _ := os.ReadFile(caPath)
	pool.AppendCertsFromPEM(pemCA)
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for ready := false; !ready; {
		if resp, err := probe.Get("https://" + addr + "/"); err == nil {
			resp.Body.Close()
			ready = true
			continue
		}
		select {
		case <-exited:
			t.Fatalf("S3 server exited: %s", out.String())
		case <-deadline:
			t.Fatalf("S3 server not answering TLS on %s: %s", addr, out.String())
		case <-tick.C:
		}
	}
	probe.CloseIdleConnections()

	cfg := config.Default()
	cfg.Packs = config.Packs{URL: "s3://tls-packs/p", Endpoint: "https://" + addr, AccessKey: "sluicetls", SecretKey: "sluice-tls-secret", TLSCA: caPath}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := packstore.OpenConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("with packs.tls_ca: %v", err)
	}
	if c, ok := st.(interface{ Close() error }); ok {
		_ = c.Close()
	}

	cfg.Packs.TLSCA = ""
	if _, err := packstore.OpenConfig(ctx, cfg); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without packs.tls_ca the private CA's certificate was accepted: %v", err)
	}
}
