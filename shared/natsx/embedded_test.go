package natsx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
)

func TestEmbeddedServerAndStreams(t *testing.T) {
	e := startJS(t)
	ctx := ctxT(t)
	if got := e.nc.MaxPayload(); got != 1<<20 {
		t.Errorf("max payload = %d, want %d", got, 1<<20)
	}
	// Idempotent: a second EnsureStreams changes nothing and does not fail.
	if err := EnsureStreams(ctx, e.js, e.cfg); err != nil {
		t.Fatalf("second EnsureStreams: %v", err)
	}
	want := map[string]string{
		proto.StreamChanges: proto.SubjectChangesAll,
		proto.StreamRouted:  proto.SubjectRoutedAll,
		proto.StreamPacks:   proto.SubjectPacksAll,
		proto.StreamDLQ:     proto.SubjectDLQAll,
	}
	for name, subj := range want {
		st, err := e.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		c := st.CachedInfo().Config
		if len(c.Subjects) != 1 || c.Subjects[0] != subj {
			t.Errorf("%s subjects = %v", name, c.Subjects)
		}
		if c.Retention != jetstream.LimitsPolicy || c.Discard != jetstream.DiscardNew || c.Storage != jetstream.FileStorage {
			t.Errorf("%s: retention %v discard %v storage %v", name, c.Retention, c.Discard, c.Storage)
		}
		if c.Duplicates != DuplicateWindow || c.MaxMsgSize != 1<<20 || c.MaxBytes != 256<<20 {
			t.Errorf("%s: duplicates %v max msg %d max bytes %d", name, c.Duplicates, c.MaxMsgSize, c.MaxBytes)
		}
		wantAge := e.cfg.NATS.MaxAge
		if name == proto.StreamDLQ {
			wantAge = DLQMaxAge
		}
		if c.MaxAge != wantAge {
			t.Errorf("%s: max age %v, want %v", name, c.MaxAge, wantAge)
		}
	}
	// REPLAY: a work queue, capped at ReplayMaxBytes.
	rs, err := e.js.Stream(ctx, proto.StreamReplay)
	if err != nil {
		t.Fatalf("stream %s: %v", proto.StreamReplay, err)
	}
	if c := rs.CachedInfo().Config; len(c.Subjects) != 1 || c.Subjects[0] != proto.SubjectReplayAll || c.Retention != jetstream.WorkQueuePolicy ||
		c.Discard != jetstream.DiscardNew || c.Duplicates != DuplicateWindow || c.MaxBytes != min(int64(e.cfg.NATS.MaxBytes), ReplayMaxBytes) {
		t.Errorf("%s: %+v", proto.StreamReplay, c)
	}
	// A message over max_payload is refused by the client.
	_, err = e.js.Publish(ctx, proto.ChangesSubject("public.t"), make([]byte, 1<<20+1))
	if !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("oversized publish: err = %v, want ErrMaxPayload", err)
	}
	// A limit change is applied by EnsureStreams (update, not only create).
	cfg := e.cfg
	cfg.NATS.MaxAge = time.Hour
	if err := EnsureStreams(ctx, e.js, cfg); err != nil {
		t.Fatal(err)
	}
	st, _ := e.js.Stream(ctx, proto.StreamRouted)
	if st.CachedInfo().Config.MaxAge != time.Hour {
		t.Errorf("max age not updated: %v", st.CachedInfo().Config.MaxAge)
	}
}

func TestEmbeddedRestartKeepsMessages(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	ctx := ctxT(t)
	start := func() (*server.Server, *nats.Conn, jetstream.JetStream) {
		s, err := StartEmbedded(EmbeddedOptions{StoreDir: dir, SyncAlways: true, MaxPayload: int32(cfg.NATS.MaxPayload)})
		if err != nil {
			t.Fatal(err)
		}
		nc, js, err := Connect(ctx, cfg.NATS, s.ClientURL(), "restart")
		if err != nil {
			t.Fatal(err)
		}
		return s, nc, js
	}
	s, nc, js := start()
	if err := EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := PublishSync(ctx, js, &nats.Msg{Subject: proto.PacksSubject("d1"), Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	s, nc, js = start()
	defer func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() }()
	st, err := js.Stream(ctx, proto.StreamPacks)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("after restart PACKS holds %d messages, want 1", n)
	}
}

func TestEmbeddedMonitorPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), MonitorPort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", port))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/jsz status %d", resp.StatusCode)
	}
}

func TestConnectAuthAndRedaction(t *testing.T) {
	ctx := ctxT(t)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, Authorization: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}
	cfg := config.Default().NATS
	if _, _, err := Connect(ctx, cfg, s.ClientURL(), "noauth"); err == nil {
		t.Fatal("connect without token succeeded")
	} else if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the token: %v", err)
	}
	cfg.Token = "s3cret"
	nc, _, err := Connect(ctx, cfg, s.ClientURL(), "auth")
	if err != nil {
		t.Fatalf("connect with token: %v", err)
	}
	nc.Close()

	if got := redact("nats://bob:pw@h1:4222,nats://h2:4222"); strings.Contains(got, "pw") || strings.Contains(got, "bob") {
		t.Errorf("redact leaked credentials: %s", got)
	}
}

func TestConnectRetriesUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Port 1 on loopback refuses connections: no server answers.
	_, _, err := Connect(ctx, config.Default().NATS, "nats://127.0.0.1:1", "none")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if _, _, err := Connect(ctx, config.Default().NATS, "embedded", "x"); err == nil {
		t.Fatal("connect to \"embedded\" should be refused")
	}
}

func TestBackoff(t *testing.T) {
	prevMax := time.Duration(0)
	for a := 1; a <= 40; a++ {
		for range 50 {
			d := Backoff(a)
			if d <= 0 || d > BackoffMax {
				t.Fatalf("Backoff(%d) = %v out of (0, %v]", a, d, BackoffMax)
			}
			if a == 1 && d >= BackoffBase {
				t.Fatalf("Backoff(1) = %v, want < %v", d, BackoffBase)
			}
			prevMax = max(prevMax, d)
		}
	}
	if prevMax < BackoffMax/2 {
		t.Errorf("backoff never approached the cap: max %v", prevMax)
	}
}
