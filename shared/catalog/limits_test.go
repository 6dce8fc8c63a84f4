package catalog_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// recordingConn passes every statement to the real connection and keeps
// its text.
type recordingConn struct {
	catalog.Conn
	mu    sync.Mutex
	stmts []string
	// behind counts the statements whose context yields the engine to the
	// pipeline's (chdb.Behind), front the others.
	behind, front int
}

func (r *recordingConn) record(ctx context.Context, q string) {
	r.mu.Lock()
	r.stmts = append(r.stmts, q)
	if chdb.IsBehind(ctx) {
		r.behind++
	} else {
		r.front++
	}
	r.mu.Unlock()
}

func (r *recordingConn) Exec(ctx context.Context, q string) error {
	r.record(ctx, q)
	return r.Conn.Exec(ctx, q)
}

func (r *recordingConn) Query(ctx context.Context, q string) (*catalog.Result, error) {
	r.record(ctx, q)
	return r.Conn.Query(ctx, q)
}

// TestIndexStatementsAreBounded: every statement Index and the inventory
// reads send carries the configured memory and time limits, and the engine
// enforces them: with a limit below what an INSERT needs, indexing fails
// with the engine's memory-limit error (and the same packs index with the
// defaults afterwards).
func TestIndexStatementsAreBounded(t *testing.T) {
	conn := chtest.Conn(t)
	rec := &recordingConn{Conn: conn}
	limits := catalog.IndexLimits{MaxMemory: 96 << 20, MaxTime: 7 * time.Second}
	c := catalog.New(rec, catalog.Options{Prefix: "limits", Limits: limits})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	store := openStore(t, "s1")
	var metas []packstore.PackMeta
	for i, n := range []int{5, 7, 3000} { // two staged, one read in place
		metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p"+string(rune('a'+i)), fuzzRows("shop1", n)))
	}
	var refs []catalog.PackRef
	for _, m := range metas {
		ref, err := c.ReadRef(t.Context(), store, m.Path())
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	rec.mu.Lock()
	rec.stmts = nil
	rec.mu.Unlock()
	if _, err := c.Index(t.Context(), store, refs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Inventory(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	bounded := 0
	for _, q := range rec.stmts {
		if !strings.Contains(q, "limits_packs") && !strings.Contains(q, "limits_rows") || strings.Contains(q, "system.") || strings.HasPrefix(q, "CREATE") || strings.HasPrefix(q, "ALTER") {
			continue // registration: DDL, its look-ups and its row, once per table and schema
		}
		if !strings.Contains(q, "max_memory_usage = 100663296") || !strings.Contains(q, "max_execution_time = 7") {
			t.Fatalf("statement without the limits: %.300s", q)
		}
		bounded++
	}
	if bounded < 4 { // inventory check, staged INSERT, in-place INSERT, inventory rows, inventory read
		t.Fatalf("%d bounded statements: %q", bounded, rec.stmts)
	}

	// An INSERT of 8 MiB of values (the engine does not count a thread's
	// first 4 MiB against the limit).
	var rows []catalogtest.Row
	big := strings.Repeat("x", 1024)
	for i := range 8192 {
		rows = append(rows, catalogtest.Ins(200, uint64(i+1), item(int64(i), "shop1", map[string]any{"big": big + fmt.Sprint(i)})))
	}
	m := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p-large", rows)
	ref, err := c.ReadRef(t.Context(), store, m.Path())
	if err != nil {
		t.Fatal(err)
	}
	refs = append(refs, ref)
	tight := catalog.New(conn, catalog.Options{Prefix: "tight", Limits: catalog.IndexLimits{MaxMemory: 1 << 20}})
	if err := tight.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := tight.Index(t.Context(), store, refs); err == nil || !strings.Contains(err.Error(), "MEMORY_LIMIT_EXCEEDED") {
		t.Fatalf("indexing within 1 MiB: got %v, want the engine's memory limit error", err)
	}
	roomy := catalog.New(conn, catalog.Options{Prefix: "tight"})
	if st, err := roomy.Index(t.Context(), store, refs); err != nil || st.Packs != len(refs) {
		t.Fatalf("indexing with the defaults: %+v, %v", st, err)
	}
}
