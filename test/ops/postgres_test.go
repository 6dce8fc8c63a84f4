package ops

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

var spaceRe = regexp.MustCompile(`\s+`)

func squash(s string) string { return strings.TrimSpace(spaceRe.ReplaceAllString(s, " ")) }

// TestInitSQLMatchesDemo checks that deploy/postgres/init.sql carries the
// demo schema of `sluice dev` (services/sluice/internal/demo, which the test
// module cannot import: it is internal) word for word.
func TestInitSQLMatchesDemo(t *testing.T) {
	src := string(read(t, "services", "sluice", "internal", "demo", "demo.go"))
	m := regexp.MustCompile("(?s)const schema = `(.*?)`").FindStringSubmatch(src)
	if m == nil {
		t.Fatal("demo.go has no `const schema`: update this test with the demo's new shape")
	}
	initSQL := squash(string(read(t, "deploy", "postgres", "init.sql")))
	for _, stmt := range strings.Split(m[1], ";") {
		if s := squash(stmt); s != "" && !strings.Contains(initSQL, s) {
			t.Errorf("init.sql lacks this statement of demo.go:\n%s", s)
		}
	}
	if !strings.Contains(src, "var Tables = []string{\"public.customers\", \"public.orders\", \"public.events\"}") {
		t.Error("demo.Tables changed: update deploy/sluice.compose.yaml source.tables and this test")
	}
}

// TestInitSQLAndTrafficOnPostgres runs init.sql and a bounded run of the
// traffic loop against a real Postgres, as the compose containers would.
func TestInitSQLAndTrafficOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postgres")
	}
	bindir, err := pgcluster.BinDir()
	if err != nil {
		t.Skipf("no Postgres binaries: %v", err)
	}
	psql := filepath.Join(bindir, "psql")
	if !isExec(psql) {
		if p, err := exec.LookPath("psql"); err == nil {
			psql = p
		} else {
			t.Skip("no psql")
		}
	}
	dsn := pgtest.NewDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	env := append(os.Environ(),
		"PGHOST="+u.Hostname(), "PGPORT="+u.Port(), "PGUSER="+u.User.Username(), "PGPASSWORD="+pw,
		"PGDATABASE="+strings.TrimPrefix(u.Path, "/"), "PATH="+filepath.Dir(psql)+":"+os.Getenv("PATH"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, psql, "-q", "-v", "ON_ERROR_STOP=1", "-f", filepath.Join(repo(t), "deploy", "postgres", "init.sql"))
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("init.sql: %v\n%s", err, out)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	count := func(q string) int64 {
		var n int64
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if c := count(`SELECT count(DISTINCT tenant_id) FROM public.customers`); c != 300 {
		t.Fatalf("init.sql seeded %d tenants, want 300", c)
	}
	orders := count(`SELECT count(*) FROM public.orders`)
	var ident string
	if err := conn.QueryRow(ctx, `SELECT relreplident::text FROM pg_class WHERE oid = 'public.events'::regclass`).Scan(&ident); err != nil || ident != "f" {
		t.Fatalf("public.events replica identity %q (%v), want full", ident, err)
	}

	const txs = 60
	cmd = exec.CommandContext(ctx, "sh", filepath.Join(repo(t), "deploy", "postgres", "traffic.sh"))
	cmd.Env = append(env, "MAX_TX=60", "RATE=1000")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("traffic.sh: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "failed") {
		t.Fatalf("traffic.sh reported failures:\n%s", out)
	}
	events := count(`SELECT count(*) FROM public.events`)
	changedOrders := count(`SELECT count(*) FROM public.orders WHERE status <> 'placed' OR 'touched' = ANY(tags)`)
	newOrders := count(`SELECT count(*) FROM public.orders`) - orders
	if events == 0 || (changedOrders == 0 && newOrders == 0) {
		t.Fatalf("after %d transactions: %d events, %d new orders, %d updated orders", txs, events, newOrders, changedOrders)
	}
	t.Logf("%d transactions: %d events, %+d orders, %d updated orders", txs, events, newOrders, changedOrders)
}
