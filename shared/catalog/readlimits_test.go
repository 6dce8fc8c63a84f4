package catalog_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// TestReadStatementsAreBounded (issue 33, reads starving indexing): both
// statements of a read page (its key range and its resolution) carry the
// read limits, so no read can take the engine's memory or hold it (on
// chDB, one statement at a time) for longer than max_execution_time; the
// engine enforces the same settings on indexing (TestIndexStatementsAreBounded).
// The defaults apply when none are set; the page reads as without them.
func TestReadStatementsAreBounded(t *testing.T) {
	for _, c := range []struct {
		name   string
		limits catalog.IndexLimits
		want   []string
	}{
		{"configured", catalog.IndexLimits{MaxMemory: 96 << 20, MaxTime: 7 * time.Second}, []string{"max_memory_usage = 100663296", "max_execution_time = 7"}},
		{"defaults", catalog.IndexLimits{}, []string{"max_memory_usage = 2147483648", "max_execution_time = 120"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &recordingConn{Conn: chtest.Conn(t)}
			cat := catalog.New(rec, catalog.Options{Prefix: "readlim_" + c.name, ReadLimits: c.limits})
			if err := cat.EnsureSchema(t.Context()); err != nil {
				t.Fatal(err)
			}
			store := openStore(t, "s1")
			index(t, cat, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "pa", fuzzRows("shop1", 50)))
			var l catalog.Lease
			s := lpublish(t, cat, &l)
			rec.mu.Lock()
			if rec.behind != 0 || rec.front == 0 {
				t.Fatalf("indexing and publishing: %d statements behind reads' priority, %d in front; want none behind", rec.behind, rec.front)
			}
			rec.stmts, rec.front = nil, 0
			rec.mu.Unlock()
			p, err := cat.Read(t.Context(), catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: s.Version, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rows) == 0 {
				t.Fatal("the page read no rows")
			}
			bounded := 0
			for _, q := range rec.stmts {
				if !strings.Contains(q, "readlim_"+c.name+"_rows") || strings.Contains(q, "system.") {
					continue // membership and schema look-ups
				}
				for _, w := range c.want {
					if !strings.Contains(q, w) {
						t.Fatalf("a read statement without %s: %.400s", w, q)
					}
				}
				bounded++
			}
			if rec.front != 0 || rec.behind != len(rec.stmts) {
				t.Fatalf("a read sent %d of its %d statements ahead of the pipeline's (not chdb.Behind)", rec.front, len(rec.stmts))
			}
			if bounded < 2 {
				t.Fatalf("%d bounded read statements, want the key range and the resolution: %q", bounded, rec.stmts)
			}
		})
	}
}
