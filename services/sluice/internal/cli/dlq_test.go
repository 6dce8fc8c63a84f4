package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// TestDLQCommandsOverHTTP runs the dlq operations the CLI uses against a
// real JetStream server behind the API's dead-letter endpoints.
func TestDLQCommandsOverHTTP(t *testing.T) {
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	cfg := config.Default()
	cfg.NATS.MaxBytes = 64 << 20
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	// One dead letter from the flusher stage, as natsx records it.
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: proto.RoutedSubject(0, "shop1"), Data: []byte("body"), Header: nats.Header{proto.HeaderTable: {"public.items"}}}); err != nil {
		t.Fatal(err)
	}
	cons, _ := js.OrderedConsumer(ctx, proto.StreamRouted, jetstream.OrderedConsumerConfig{})
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.NewDeadLetter(js, "flusher").Send(ctx, m, errors.New("corrupt\tpack")); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	api.RegisterDLQ(h, api.Deps{JS: js, Log: log})
	hs := httptest.NewServer(h.Handler())
	defer hs.Close()

	g := &globalFlags{server: hs.URL, config: filepath.Join(t.TempDir(), "none.yaml")}
	ops, done, err := (&dlqFlags{}).ops(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	list, err := ops.List(ctx, "flusher", 0)
	if err != nil || len(list) != 1 || list[0].Reason != "corrupt pack" {
		t.Fatalf("list: %+v %v", list, err)
	}
	var buf bytes.Buffer
	if err := printDLQList(&buf, list, false); err != nil || !strings.Contains(buf.String(), "corrupt pack") || !strings.Contains(buf.String(), "sluice.routed.0.shop1") {
		t.Fatalf("list output:\n%s", buf.String())
	}
	e, err := ops.Show(ctx, list[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := printDLQEntry(&buf, e); err != nil || !strings.Contains(buf.String(), "not decodable") || !strings.Contains(buf.String(), "Sluice-Table: public.items") {
		t.Fatalf("show output:\n%s", buf.String())
	}
	r, err := ops.Replay(ctx, list[0].Seq)
	if err != nil || r.Stream != proto.StreamRouted || r.NewSeq != 2 {
		t.Fatalf("replay: %+v %v", r, err)
	}
	if _, err := ops.Replay(ctx, list[0].Seq); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("second replay: %v, want 404", err)
	}
	p, err := ops.Purge(ctx, "", 0)
	if err != nil || p.Purged != 0 {
		t.Fatalf("purge: %+v %v", p, err)
	}
}

// TestDLQDirectRefusesEmbedded: with nats.url embedded, --nats cannot work
// and says why.
func TestDLQDirectRefusesEmbedded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("nats:\n  url: embedded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := (&dlqFlags{direct: true}).ops(context.Background(), &globalFlags{config: path})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "embedded") {
		t.Fatalf("got %v", err)
	}
}
