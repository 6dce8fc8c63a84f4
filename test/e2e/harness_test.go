package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-bin-")
	if err != nil {
		panic(err)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "github.com/sluice-cdc/sluice/services/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	pgtest.Shutdown()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// sluice is one `sluice dev` process.
type sluice struct {
	t      testing.TB
	dir    string
	cfg    string
	server string
	cmd    *exec.Cmd
	log    *os.File
}

func newSluice(t testing.TB, dsn string, tables []string, extra string) *sluice {
	dir := t.TempDir()
	port := freePort(t)
	s := &sluice{t: t, dir: dir, cfg: filepath.Join(dir, "sluice.yaml"), server: fmt.Sprintf("http://127.0.0.1:%d", port)}
	cfg := fmt.Sprintf(`source:
  dsn: %s
  tables: [%s]
  routing_column: tenant_id
  slot: sluice_e2e
  publication: sluice_e2e
  backfill: true
destinations:
  mode: auto
nats:
  url: embedded
catalog:
  url: embedded
data_dir: %s
delivery:
  flush_interval: 1s
publisher:
  interval: 500ms
http:
  listen: 127.0.0.1:%d
telemetry:
  log_level: info
%s`, dsn, strings.Join(tables, ", "), filepath.Join(dir, "data"), port, extra)
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *sluice) start() {
	s.t.Helper()
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("sluice-%d.log", time.Now().UnixNano())))
	if err != nil {
		s.t.Fatal(err)
	}
	s.log = log
	s.cmd = exec.Command(sluiceBin, "dev", "--config", s.cfg)
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.t.Fatalf("sluice dev exited early; log:\n%s", s.tail())
		default:
		}
		resp, err := http.Get(s.server + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Fatalf("sluice dev never became healthy; log:\n%s", s.tail())
}

func (s *sluice) tail() string {
	if s.log == nil {
		return ""
	}
	b, _ := os.ReadFile(s.log.Name())
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

func (s *sluice) stop() {
	if s.cmd == nil || s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for s.cmd.ProcessState == nil {
			time.Sleep(50 * time.Millisecond)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (s *sluice) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, append(args, "--server", s.server)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("sluice %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// pg is the source database.
type pg struct {
	t   testing.TB
	dsn string
}

func (p *pg) exec(sql string, args ...any) {
	p.t.Helper()
	conn, err := pgx.Connect(context.Background(), p.dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
}

func (p *pg) strings(sql string, args ...any) []string {
	p.t.Helper()
	conn, err := pgx.Connect(context.Background(), p.dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "SET TimeZone = 'UTC'"); err != nil {
		p.t.Fatal(err)
	}
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func (p *pg) lsn() string { return p.strings("SELECT pg_current_wal_lsn()::text")[0] }

// norm puts a JSON value into a canonical form: numbers as exact rationals,
// timestamps as UTC instants.
func norm(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = norm(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = norm(e)
		}
		return out
	case json.Number:
		r, ok := new(big.Rat).SetString(string(x))
		if !ok {
			return "number:" + string(x)
		}
		return "number:" + r.RatString()
	case string:
		if len(x) >= 19 && x[4] == '-' && x[10] == 'T' {
			for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
				if ts, err := time.Parse(layout, x); err == nil {
					return "ts:" + ts.UTC().Format(time.RFC3339Nano)
				}
			}
		}
		return x
	}
	return v
}

func decode(t testing.TB, line string) map[string]any {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decoding %q: %v", line, err)
	}
	return m
}

// oracle compares every tenant's copy of table with the source and returns
// the rows checked and the differences.
func oracle(t testing.TB, src *pg, s *sluice, table string, keys []string) (int, []string) {
	var diffs []string
	checked := 0
	tenants := src.strings(fmt.Sprintf("SELECT DISTINCT tenant_id::text FROM %s", table))
	for _, tenant := range tenants {
		want := map[string]any{}
		for _, l := range src.strings(fmt.Sprintf("SELECT to_jsonb(x)::text FROM %s x WHERE tenant_id::text = $1", table), tenant) {
			r := decode(t, l)
			want[keyOf(r, keys)] = norm(r)
		}
		out, err := s.cli("read", "--destination", tenant, "--table", table, "--format", "jsonl")
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s/%s: read failed: %v", table, tenant, err))
			continue
		}
		got := map[string]any{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l == "" {
				continue
			}
			r := decode(t, l)
			if fmt.Sprint(r["tenant_id"]) != tenant {
				diffs = append(diffs, fmt.Sprintf("%s/%s: row of tenant %v leaked in", table, tenant, r["tenant_id"]))
			}
			k := keyOf(r, keys)
			if _, dup := got[k]; dup {
				diffs = append(diffs, fmt.Sprintf("%s/%s: duplicate key %s", table, tenant, k))
			}
			got[k] = norm(r)
			checked++
		}
		diffs = append(diffs, compare(table+"/"+tenant, want, got)...)
	}
	return checked, diffs
}

func keyOf(r map[string]any, keys []string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprint(r[k])
	}
	return strings.Join(parts, "|")
}

func compare(label string, want, got map[string]any) []string {
	var diffs []string
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, inW := want[k]
		g, inG := got[k]
		switch {
		case !inG:
			diffs = append(diffs, fmt.Sprintf("%s: missing key %s: want %v", label, k, w))
		case !inW:
			diffs = append(diffs, fmt.Sprintf("%s: phantom key %s: got %v", label, k, g))
		default:
			wj, _ := json.Marshal(w)
			gj, _ := json.Marshal(g)
			if !bytes.Equal(wj, gj) {
				diffs = append(diffs, fmt.Sprintf("%s: key %s differs:\n  want %s\n  got  %s", label, k, wj, gj))
			}
		}
		if len(diffs) > 20 {
			break
		}
	}
	return diffs
}
