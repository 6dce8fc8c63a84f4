package capture

import (
	"testing"

	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
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
			got, detail, err := SchemaChange(t.Context(), nil, 1, c.old, c.cur)
			if err != nil || got != c.want {
				t.Errorf("reason %q (%s, %v), want %q", got, detail, err, c.want)
			}
		})
	}
}
