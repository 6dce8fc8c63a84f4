package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// TestEmbeddedNATSListenAndMonitor: the embedded server listens on
// nats.listen and serves monitoring on nats.monitor; when a port is taken
// it falls back to a free one and says so in the log; /jsz lists the
// provisioned streams.
func TestEmbeddedNATSListenAndMonitor(t *testing.T) {
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	// The client port is held by another listener; the monitor port is free.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	monitor := free()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.NATS.Listen = taken.Addr().String()
	cfg.NATS.Monitor = fmt.Sprintf("127.0.0.1:%d", monitor)
	var logs bytes.Buffer
	cfg.Telemetry.LogFormat = "json"
	log := telemetry.NewLoggerTo(&logs, cfg.Telemetry, "test")
	ns, err := startEmbeddedNATS(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if got := ns.Addr().String(); got == cfg.NATS.Listen {
		t.Fatalf("the server claims the taken address %s", got)
	}
	if !strings.Contains(logs.String(), "nats.listen is taken") || !strings.Contains(logs.String(), cfg.NATS.Listen) {
		t.Fatalf("no log line about the fall-back: %s", logs.String())
	}
	if got := ns.MonitorAddr(); got == nil || got.Port != monitor {
		t.Fatalf("monitoring on %v, want port %d", got, monitor)
	}

	// Through Open: the streams show in /jsz.
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.NATS.Monitor = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	ctx := context.Background()
	st, err := Open(ctx, cfg, "test", Needs{EmbeddedNATS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	resp, err := http.Get(fmt.Sprintf("http://%s/jsz?streams=true", st.NATS.MonitorAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name string `json:"name"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			names[s.Name] = true
		}
	}
	for _, want := range []string{proto.StreamChanges, proto.StreamRouted, proto.StreamPacks} {
		if !names[want] {
			t.Errorf("/jsz lists streams %v, without %s", names, want)
		}
	}
}
