package capture

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// SchemaChange names the WAL-less rewrites of existing rows from two
// Relation messages' columns: a rename (same place and type, a new name),
// a column dropped and added again (it moves after a column that followed
// it); a column added without a default (HasDefault unset here: the
// catalog query is covered end to end) or dropped is none.
func TestSchemaChange(t *testing.T) {
	cols := func(spec ...any) []pgoutput.Column {
		var out []pgoutput.Column
		for i := 0; i < len(spec); i += 2 {
			out = append(out, pgoutput.Column{Name: spec[i].(string), TypeOID: uint32(spec[i+1].(int))})
		}
		return out
	}
	base := cols("tenant_id", 25, "id", 20, "name", 25, "v", 23)
	for _, c := range []struct {
		name string
		old  []pgoutput.Column
		cur  []pgoutput.Column
		want string
	}{
		{"unchanged", base, base, ""},
		{"renamed", base, cols("tenant_id", 25, "id", 20, "title", 25, "v", 23), ReasonColumnRenamed},
		{"renamed, start description", cols("tenant_id", 0, "id", 0, "name", 0, "v", 0), cols("tenant_id", 25, "id", 20, "title", 25, "v", 23), ReasonColumnRenamed},
		{"dropped and added again", base, cols("tenant_id", 25, "id", 20, "v", 23, "name", 25), ReasonColumnReadded},
		{"added without default", base, cols("tenant_id", 25, "id", 20, "name", 25, "v", 23, "x", 23), ""},
		{"dropped", base, cols("tenant_id", 25, "id", 20, "v", 23), ""},
		{"type changed (a halt, not a resync)", base, cols("tenant_id", 25, "id", 20, "name", 23, "v", 23), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, detail, err := SchemaChange(t.Context(), nil, 1, c.old, c.cur, nil, nil)
			if err != nil || got != c.want {
				t.Errorf("reason %q (%s, %v), want %q", got, detail, err, c.want)
			}
		})
	}
}

// The last column dropped and added again under its name and type comes
// back in its place: the two Relation messages are equal, and only the
// attnums (pg_attribute) tell. The control: the same columns without them
// show nothing, which is how its rows kept their old values.
func TestSchemaChangeReaddedLastColumn(t *testing.T) {
	cols := []pgoutput.Column{{Name: "tenant_id", TypeOID: 25}, {Name: "id", TypeOID: 20}, {Name: "v", TypeOID: 23}}
	before := ColumnNums{"tenant_id": 1, "id": 2, "v": 3}
	after := ColumnNums{"tenant_id": 1, "id": 2, "v": 4} // attnum 3 is the dropped one
	got, detail, err := SchemaChange(t.Context(), nil, 1, cols, cols, before, after)
	if err != nil || got != ReasonColumnReadded || !strings.Contains(detail, "column v") {
		t.Errorf("with attnums: reason %q (%s, %v), want %q naming v", got, detail, err, ReasonColumnReadded)
	}
	if got, _, _ := SchemaChange(t.Context(), nil, 1, cols, cols, nil, nil); got != "" {
		t.Errorf("control: without attnums the change shows as %q", got)
	}
	renamed := []pgoutput.Column{cols[0], cols[1], {Name: "w", TypeOID: 23}}
	if got, _, _ := SchemaChange(t.Context(), nil, 1, cols, renamed, before, ColumnNums{"tenant_id": 1, "id": 2, "w": 3}); got != ReasonColumnRenamed {
		t.Errorf("a rename keeps its attnum: reason %q, want %q", got, ReasonColumnRenamed)
	}
	if got, _, _ := SchemaChange(t.Context(), nil, 1, cols, cols, before, before); got != "" {
		t.Errorf("unchanged: reason %q", got)
	}

	// The periodic check reads the attnums too, and makes them the last
	// read: the Relation message that follows queues nothing again.
	st := NewState()
	tbl := source.Table{Name: "public.t", OID: 1, Columns: []string{"tenant_id", "id", "v"}, ColumnNums: []int16{1, 2, 3}}
	var queued []string
	auto := func(_ context.Context, table, reason, _ string) error {
		queued = append(queued, table+" "+reason)
		return nil
	}
	for range 2 {
		if _, err := CheckSchema(t.Context(), st, tbl, cols, after, nil, auto); err != nil {
			t.Fatal(err)
		}
	}
	if len(queued) != 1 || queued[0] != "public.t "+ReasonColumnReadded {
		t.Errorf("periodic checks queued %v, want one %s", queued, ReasonColumnReadded)
	}
	if got, _, _ := SchemaChange(t.Context(), nil, 1, LastColumns(st, tbl), cols, LastColumnNums(st, tbl), after); got != "" {
		t.Errorf("the Relation message after the periodic check: reason %q, want none", got)
	}
}

// ATTACH and DETACH PARTITION move rows in and out of a partitioned table
// with no row in the WAL: a change of its leaf partitions (against the
// start's, then the last read) queues one resync, and the same set again
// queues nothing. A plain table (no partitions) never does.
func TestCheckPartitions(t *testing.T) {
	st := NewState()
	tbl := source.Table{Name: "public.pt", OID: 1, Partitions: []uint32{10, 11}}
	var queued []string
	auto := func(_ context.Context, table, reason, detail string) error {
		queued = append(queued, table+" "+reason+" "+detail)
		return nil
	}
	for _, step := range []struct {
		cur  []uint32
		want int
	}{
		{[]uint32{10, 11}, 0},     // as at start
		{[]uint32{10, 11, 12}, 1}, // attached
		{[]uint32{10, 11, 12}, 1}, // seen
		{[]uint32{10, 12}, 2},     // detached
	} {
		if _, err := CheckPartitions(t.Context(), st, tbl, step.cur, auto); err != nil {
			t.Fatal(err)
		}
		if len(queued) != step.want {
			t.Fatalf("partitions %v: queued %v, want %d", step.cur, queued, step.want)
		}
	}
	if !strings.Contains(queued[0], ReasonPartitions) || !strings.Contains(queued[0], "[12]") || !strings.Contains(queued[1], "[11]") {
		t.Errorf("queued %v", queued)
	}
	plain := source.Table{Name: "public.plain", OID: 2}
	if r, _ := CheckPartitions(t.Context(), st, plain, nil, auto); r != "" {
		t.Errorf("a plain table: %q", r)
	}
}
