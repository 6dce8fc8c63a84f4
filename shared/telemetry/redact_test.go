package telemetry

import (
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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-cdc/sluice/shared/config"
)

// collector is an OTLP/gRPC trace receiver (the protocol's own generated
// service over a real gRPC server, with or without TLS): the attributes of
// every span it receives, as "key=value".
type collector struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	attrs []string
}

func (c *collector) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				for _, kv := range sp.Attributes {
					c.attrs = append(c.attrs, kv.Key+"="+kv.Value.GetStringValue())
				}
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) got() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.attrs, " ")
}

// startCollector serves a collector on loopback, with TLS from a fresh CA
// when tlsOn, and returns it, its address and the CA's PEM file.
func startCollector(t *testing.T, tlsOn bool) (*collector, string, string) {
	t.Helper()
	var opts []grpc.ServerOption
	caFile := ""
	if tlsOn {
		var cert tls.Certificate
		caFile, cert = testCA(t)
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	c := &collector{}
	coltrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c, ln.Addr().String(), caFile
}

func testCA(t *testing.T) (string, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}

// export sends one span with a destination's attributes through a
// provider built from cfg and returns whether the export succeeded.
func export(t *testing.T, cfg config.Telemetry) error {
	t.Helper()
	exportTimeout, exportRetry = 3*time.Second, false
	t.Cleanup(func() { exportTimeout, exportRetry = 10*time.Second, true })
	ctx := context.Background()
	tp, err := NewTracerProvider(ctx, "x", cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(ctx, "flusher.flush")
	span.SetAttributes(
		attribute.String("sluice.destination", "acme"),
		attribute.String("messaging.destination.name", "sluice.packs.acme"),
		attribute.String("messaging.message.id", "r:c:public.orders:0/1:0/2:acme"),
		attribute.String("sluice.table", "public.orders"),
	)
	span.End()
	if err := tp.ForceFlush(ctx); err != nil {
		_ = tp.Shutdown(ctx)
		return err
	}
	return tp.Shutdown(ctx)
}

// TestOTLPTLS: with telemetry.otlp_tls_ca the spans reach a TLS
// collector; the plaintext exporter (the old and default link) cannot
// talk to it (negative control), and reaches a plaintext one.
func TestOTLPTLS(t *testing.T) {
	c, addr, ca := startCollector(t, true)
	if err := export(t, config.Telemetry{OTLPEndpoint: addr, OTLPTLSCA: ca, DestinationNames: "plain"}); err != nil {
		t.Fatalf("TLS export: %v", err)
	}
	if !strings.Contains(c.got(), "sluice.table=public.orders") {
		t.Fatalf("the TLS collector got %q", c.got())
	}
	before := c.got()
	if err := export(t, config.Telemetry{OTLPEndpoint: addr, DestinationNames: "plain"}); err == nil || c.got() != before {
		t.Fatalf("a plaintext exporter talked to the TLS collector: %v", err)
	}
	// otlp_tls without a CA uses the system's roots: this test CA is not
	// among them, so the export fails on the certificate.
	if err := export(t, config.Telemetry{OTLPEndpoint: addr, OTLPTLS: true, DestinationNames: "plain"}); err == nil {
		t.Fatal("otlp_tls trusted a certificate of an unknown CA")
	}
	if _, err := NewTracerProvider(context.Background(), "x", config.Telemetry{OTLPEndpoint: addr, OTLPTLSCA: filepath.Join(t.TempDir(), "none.pem")}); err == nil || !strings.Contains(err.Error(), "otlp_tls_ca") {
		t.Fatalf("a missing CA file: %v", err)
	}
}

// TestDestinationNamesInSpans: with telemetry.destination_names: hash no
// exported span names the destination (attribute, packs subject, routed
// message id), and the pseudonym is HashDestination's, which `sluice
// trace` searches for; omit drops the attribute; plain (negative control)
// exports the name.
func TestDestinationNamesInSpans(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		want, not []string
	}{
		{"plain", []string{"sluice.destination=acme", "messaging.destination.name=sluice.packs.acme", "messaging.message.id=r:c:public.orders:0/1:0/2:acme"}, nil},
		{"hash", []string{"sluice.destination=" + HashDestination("acme"), "messaging.destination.name=sluice.packs." + HashDestination("acme"), "messaging.message.id=r:c:public.orders:0/1:0/2:" + HashDestination("acme"), "sluice.table=public.orders"}, []string{"acme"}},
		{"omit", []string{"messaging.destination.name=sluice.packs.-", "sluice.table=public.orders"}, []string{"acme", "sluice.destination="}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			c, addr, _ := startCollector(t, false)
			if err := export(t, config.Telemetry{OTLPEndpoint: addr, DestinationNames: tc.mode}); err != nil {
				t.Fatal(err)
			}
			got := c.got()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("exported %q, want %q", got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("exported %q, names %q", got, n)
				}
			}
		})
	}
}
