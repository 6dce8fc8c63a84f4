package reader

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A standby takes over within seconds when the active reader dies without
// releasing its lease, and nothing committed meanwhile is lost.
func TestHATakeover(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL)
	a := e.start(e.newReader("a", func(r *Reader) { r.noRelease = true }))
	waitStreaming(t, a)
	b := e.start(e.newReader("b", nil))
	eventually(t, 5*time.Second, func() error {
		if s := b.r.Status().State; s != "standby" {
			return fmt.Errorf("b is %s", s)
		}
		return nil
	})
	e.exec(`INSERT INTO items VALUES ('t', 1, 'before')`)
	waitRows(t, e, 1)
	killed := time.Now()
	e.kill(a)
	e.exec(`INSERT INTO items VALUES ('t', 2, 'during')`)
	waitStreaming(t, b)
	took := time.Since(killed)
	t.Logf("takeover after %s (lease_ttl %s)", took.Round(10*time.Millisecond), e.cfg.Reader.LeaseTTL)
	if took > 3*e.cfg.Reader.LeaseTTL {
		t.Errorf("takeover took %s", took)
	}
	e.exec(`INSERT INTO items VALUES ('t', 3, 'after')`)
	rows := waitRows(t, e, 3)
	seen := map[int64]bool{}
	for _, r := range rows {
		seen[r.vals["id"].(int64)] = true
	}
	for i := int64(1); i <= 3; i++ {
		if !seen[i] {
			t.Errorf("id %d lost in the takeover", i)
		}
	}
	if st := b.r.Status(); st.LeaseTerm < 2 || st.Holder != "b" {
		t.Errorf("b status %+v", st)
	}
}

// Validation failures name the problem and what to run.
func TestValidation(t *testing.T) {
	cases := []struct {
		name, sql, table, want string
	}{
		{"missing table", ``, "public.nope", "does not exist"},
		{"no key", `CREATE TABLE t (tenant_id text, id int)`, "public.t", "ADD PRIMARY KEY"},
		{"routing not in identity", `CREATE TABLE t (tenant_id text, id int PRIMARY KEY)`, "public.t", "ALTER TABLE public.t REPLICA IDENTITY FULL;"},
		{"no routing column", `CREATE TABLE t (org text, id int PRIMARY KEY)`, "public.t", `no routing column "tenant_id"`},
		{"reserved column", `CREATE TABLE t (tenant_id text, id int, _sluice_x int, PRIMARY KEY (tenant_id, id))`, "public.t", "reserved"},
		{"identity nothing", `CREATE TABLE t (tenant_id text, id int, PRIMARY KEY (tenant_id, id)); ALTER TABLE t REPLICA IDENTITY NOTHING`, "public.t", "REPLICA IDENTITY NOTHING"},
		{"date routing column", `CREATE TABLE t (tenant_id date, id int, PRIMARY KEY (tenant_id, id))`, "public.t", "routing column tenant_id is date"},
		{"generated column of a TOASTed and another column", `CREATE TABLE t (tenant_id text, id int, v int, body text, g int GENERATED ALWAYS AS (v + length(body)) STORED, PRIMARY KEY (tenant_id, id))`, "public.t", "generated column g reads body"},
		{"boolean routing column", `CREATE TABLE t (tenant_id boolean, id int, PRIMARY KEY (tenant_id, id))`, "public.t", "routing column tenant_id is boolean"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.table)
			if c.sql != "" {
				e.exec(c.sql)
			}
			r := e.newReader("v", nil)
			pool := e.statePool()
			defer pool.Close()
			r.deps.State = pool
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := r.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			t.Log(err)
		})
	}
}

// A table added to the configuration is added to the publication.
func TestPublicationAddsTable(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL + `CREATE TABLE more (tenant_id text, id int, PRIMARY KEY (tenant_id, id));`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	run.stop(t)
	e.cfg.Source.Tables = []string{"public.items", "public.more"}
	run = e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO more VALUES ('t', 1)`)
	rows := waitRows(t, e, 1)
	if rows[0].table != "public.more" {
		t.Errorf("got %v", rows[0])
	}
}

// A reader that loses its lease stops streaming at once and waits as a
// standby; its Status says so.
func TestLeaseLostStopsStreaming(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	// Another holder takes the lease over (as after an expiry).
	e.exec(`UPDATE sluice.leases SET holder = 'thief', term = term + 1, expires_at = now() + interval '1 hour' WHERE name = 'reader/sluice_test'`)
	eventually(t, 2*e.cfg.Reader.LeaseTTL, func() error {
		if s := run.r.Status().State; s != "standby" {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	var active int
	eventually(t, 5*time.Second, func() error {
		pool := e.statePool()
		defer pool.Close()
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'sluice_test' AND active`).Scan(&active); err != nil {
			return err
		}
		if active != 0 {
			return fmt.Errorf("slot still active")
		}
		return nil
	})
	b, err := json.Marshal(run.r.Status())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status: %s", b)
}

// Readers that start together (an active one and its standbys) create the
// reader's state tables without colliding.
func TestConcurrentMigrate(t *testing.T) {
	e := newEnv(t, "public.a")
	pool := e.statePool()
	defer pool.Close()
	if _, err := pool.Exec(context.Background(), `CREATE SCHEMA IF NOT EXISTS sluice`); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		go func() { errs <- migrate(context.Background(), pool, "sluice") }()
	}
	for i := 0; i < 6; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
