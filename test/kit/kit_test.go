package kit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNorm(t *testing.T) {
	for _, c := range []struct {
		a, b string
		eq   bool
	}{
		{`{"n": 1.50}`, `{"n": 1.5}`, true},
		{`{"n": 1.5}`, `{"n": 1.51}`, false},
		{`{"n": 12345678901234567890123456789.1}`, `{"n": 12345678901234567890123456789.10}`, true},
		{`{"n": 12345678901234567890123456789.1}`, `{"n": 12345678901234567890123456789.2}`, false},
		{`{"t": "2026-01-01T00:00:00+00:00"}`, `{"t": "2026-01-01T00:00:00Z"}`, true},
		{`{"t": "2026-01-01T00:00:00+00:00"}`, `{"t": "2026-01-01T00:00:00.000001Z"}`, false},
		{`{"s": "NaN"}`, `{"s": "NaN"}`, true},
		{`{"a": [1, null]}`, `{"a": [1]}`, false},
		{`{"a": 1}`, `{"a": 1, "_sluice_lsn": 5}`, false},
		{`{"a": "1"}`, `{"a": 1}`, false},
		{`{"a": "` + strings.Repeat("x", 100) + `y"}`, `{"a": "` + strings.Repeat("x", 100) + `z"}`, false},
	} {
		a, err := decode(c.a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := decode(c.b)
		if err != nil {
			t.Fatal(err)
		}
		if got := full(norm(a)) == full(norm(b)); got != c.eq {
			t.Errorf("%s vs %s: equal %v, want %v", c.a, c.b, got, c.eq)
		}
	}
}

// TestNATSServerRestart: the nats-server binary the multi-process tests
// run keeps JetStream data across a kill -9 and a restart.
func TestNATSServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server")
	}
	bin, err := NATSServerBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port, _ := FreePort()
	conf := filepath.Join(dir, "nats.conf")
	_ = os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, filepath.Join(dir, "js"))), 0o644)
	p := &Proc{Name: "nats", Bin: bin, Args: []string{"-c", conf}, Dir: dir, Ready: fmt.Sprintf("127.0.0.1:%d", port)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if p.Running() {
		t.Fatal("still running after kill -9")
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := s.Info(ctx)
		if err == nil {
			if info.State.Msgs != 1 {
				t.Fatalf("messages after restart: %d", info.State.Msgs)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p.Kills() != 1 || p.Starts() != 2 || len(p.Logs()) != 2 {
		t.Errorf("kills %d starts %d logs %d", p.Kills(), p.Starts(), len(p.Logs()))
	}
	if !strings.Contains(p.Tail(100000), "Server is ready") {
		t.Errorf("log: %s", p.Tail(1000))
	}
	_ = json.Valid
}

// TestSamplePick: a Sample reads every Always tenant plus N of the rest,
// the same N for the same seed, and counts the others as skipped.
func TestSamplePick(t *testing.T) {
	var all []string
	for i := 0; i < 1000; i++ {
		all = append(all, fmt.Sprintf("t%04d", i))
	}
	always := []string{"t0003", "t0500", "t0999"}
	s := &Sample{Always: always, N: 10, Seed: 7}
	got, skipped := s.pick(all)
	if len(got) != 13 || skipped != 987 {
		t.Fatalf("picked %d, skipped %d; want 13 and 987", len(got), skipped)
	}
	in := map[string]bool{}
	for _, g := range got {
		in[g] = true
	}
	for _, a := range always {
		if !in[a] {
			t.Errorf("%s changed in the last phase but is not read", a)
		}
	}
	again, _ := (&Sample{Always: always, N: 10, Seed: 7}).pick(all)
	other, _ := (&Sample{Always: always, N: 10, Seed: 8}).pick(all)
	if fmt.Sprint(again) != fmt.Sprint(got) || fmt.Sprint(other) == fmt.Sprint(got) {
		t.Errorf("the sample is not a function of its seed: %v / %v / %v", got, again, other)
	}
	if none, skipped := (*Sample)(nil).pick(all); len(none) != 1000 || skipped != 0 {
		t.Errorf("no Sample reads %d and skips %d, want all", len(none), skipped)
	}
}
