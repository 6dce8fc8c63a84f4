package chdbhttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainRunner{m},
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int { code := r.m.Run(); chtest.Close(); return code }

func get(t *testing.T, u string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestCurlShape: what a person with curl sees.
func TestCurlShape(t *testing.T) {
	base := chtest.ShimURL(t)
	db := chtest.Database(t)

	if code, _, body := get(t, base+"/ping"); code != 200 || body != "Ok.\n" {
		t.Fatalf("/ping: %d %q", code, body)
	}
	code, hdr, body := get(t, base+"/?query="+url.QueryEscape("SELECT 1 + 1, 'x'"))
	if code != 200 || body != "2\tx\n" || hdr.Get("X-ClickHouse-Format") != "TabSeparated" {
		t.Fatalf("query param: %d %q %v", code, body, hdr)
	}
	resp, err := http.Post(base+"/?database="+db+"&default_format=JSONEachRow", "application/octet-stream", strings.NewReader("SELECT currentDatabase() AS d"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"d":"`+db+`"}`+"\n" {
		t.Fatalf("POST body with database: %d %q", resp.StatusCode, b)
	}
	// A setting in the URL applies to the query.
	code, _, body = get(t, base+"/?max_result_rows=1&result_overflow_mode=throw&query="+url.QueryEscape("SELECT number FROM numbers(5)"))
	if code == 200 || !strings.Contains(body, "Code: 396") {
		t.Fatalf("max_result_rows setting not applied: %d %q", code, body)
	}
	// Errors look like ClickHouse's.
	code, hdr, body = get(t, base+"/?query="+url.QueryEscape("SELECT * FROM nope"))
	if code != 404 || hdr.Get("X-ClickHouse-Exception-Code") != "60" || !strings.HasPrefix(body, "Code: 60. DB::Exception:") {
		t.Fatalf("unknown table: %d %v %q", code, hdr, body)
	}
	code, hdr, _ = get(t, base+"/?param_x=1&query=SELECT+1")
	if code != 400 || hdr.Get("X-ClickHouse-Exception-Code") != "48" {
		t.Fatalf("param_: %d %v", code, hdr)
	}
	if code, _, _ := get(t, base+"/nothing"); code != 404 {
		t.Fatalf("/nothing: %d", code)
	}
}

// TestClickHouseGo drives the shim with clickhouse-go's HTTP protocol, with
// and without native compression, and checks typed scans and errors.
func TestClickHouseGo(t *testing.T) {
	base := chtest.ShimURL(t)
	db := chtest.Database(t)
	for _, comp := range []clickhouse.CompressionMethod{clickhouse.CompressionNone, clickhouse.CompressionLZ4, clickhouse.CompressionZSTD} {
		t.Run(comp.String(), func(t *testing.T) {
			opt, err := catalog.ServerOptions(config.Catalog{URL: base + "/" + db})
			if err != nil {
				t.Fatal(err)
			}
			opt.Compression = &clickhouse.Compression{Method: comp}
			conn, err := clickhouse.Open(opt)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx := context.Background()
			if err := conn.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			v, err := conn.ServerVersion()
			if err != nil || v.Version.Major < 25 {
				t.Fatalf("server version %v %v", v, err)
			}
			rows, err := conn.Query(ctx, "SELECT number, toString(number), [number, NULL] FROM numbers(100000)")
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var (
					a uint64
					s string
					l []*uint64
				)
				if err := rows.Scan(&a, &s, &l); err != nil {
					t.Fatal(err)
				}
				if a != uint64(n) || s != strings.TrimSpace(s) || len(l) != 2 || *l[0] != a || l[1] != nil {
					t.Fatalf("row %d: %v %q %v", n, a, s, l)
				}
				n++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			rows.Close()
			if n != 100000 {
				t.Fatalf("%d rows", n)
			}
			var dbName string
			if err := conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&dbName); err != nil || dbName != db {
				t.Fatalf("database %q %v, want %s", dbName, err, db)
			}
			err = conn.Exec(ctx, "SELECT * FROM nope")
			var ex *clickhouse.Exception
			if !errors.As(err, &ex) || ex.Code != 60 {
				t.Fatalf("error %v, want exception 60", err)
			}
		})
	}
}

// TestDatabaseIsolation: handles bound to different databases that hold a
// table of the same name, used concurrently, each see only their own.
func TestDatabaseIsolation(t *testing.T) {
	ctx := context.Background()
	var conns []catalog.Conn
	for i := 0; i < 3; i++ {
		c := chtest.Conn(t)
		if err := c.Exec(ctx, "CREATE TABLE same (v Int64) ENGINE = Memory"); err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctx, "INSERT INTO same VALUES ("+string(rune('0'+i))+")"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	errs := make(chan error, 3)
	for i, c := range conns {
		go func() {
			for j := 0; j < 30; j++ {
				res, err := c.Query(ctx, "SELECT v FROM same")
				if err != nil {
					errs <- err
					return
				}
				if !reflect.DeepEqual(res.Rows, [][]any{{int64(i)}}) {
					errs <- errors.New("handle " + string(rune('0'+i)) + " saw another database's rows")
					return
				}
			}
			errs <- nil
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestServe: the server stops, and Serve returns nil, when ctx is cancelled.
func TestServe(t *testing.T) {
	e := chtest.Engine(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- chdbhttp.Serve(ctx, ln, chdbhttp.New(e, chdbhttp.Options{User: "u", Password: "p"})) }()
	conn, err := catalog.OpenServer(ctx, config.Catalog{URL: "http://" + ln.Addr().String() + "/default", User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := conn.Query(ctx, "SELECT 'hi' AS s"); err != nil || res.Rows[0][0] != "hi" {
		t.Fatalf("%v %v", res, err)
	}
	_ = conn.Close()
	if _, err := catalog.OpenServer(ctx, config.Catalog{URL: "http://" + ln.Addr().String() + "/default", User: "u", Password: "wrong"}); err == nil {
		t.Fatal("wrong password accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
