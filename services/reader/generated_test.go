package reader

import (
	"fmt"
	"slices"
	"testing"
)

// generatedOf lists column col of rows.
func generatedOf(rows []row, col string) string {
	var got []any
	for _, r := range rows {
		got = append(got, r.vals[col])
	}
	return fmt.Sprint(got)
}

// Stored generated columns, which pgoutput (before Postgres 18) does not
// send, are evaluated on each change's own values: inserts and updates carry
// the value they stored.
func TestGeneratedColumns(t *testing.T) {
	e := newEnv(t, "public.g")
	e.exec(`CREATE TABLE g (tenant_id text, id int, v int, dbl int GENERATED ALWAYS AS (v * 2) STORED,
		"Label x" text GENERATED ALWAYS AS ('v=' || v::text) STORED, PRIMARY KEY (tenant_id, id))`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO g (tenant_id, id, v) VALUES ('t', 1, 5)`)
	e.exec(`UPDATE g SET v = 7 WHERE id = 1`)
	e.exec(`UPDATE g SET v = NULL WHERE id = 1`)
	e.exec(`DELETE FROM g WHERE id = 1`)
	rows := waitRows(t, e, 4)
	if got := generatedOf(rows, "dbl"); got != "[10 14 <nil> <nil>]" {
		t.Errorf("dbl in insert, update, update to NULL, delete: %s; want [10 14 <nil> <nil>]", got)
	}
	if got := generatedOf(rows, "Label x"); got != "[v=5 v=7 <nil> <nil>]" {
		t.Errorf(`"Label x" in insert, update, update to NULL, delete: %s; want [v=5 v=7 <nil> <nil>]`, got)
	}
}

// The changes reach the reader after the row changed again and was deleted
// (the reader was stopped meanwhile and replays them): each carries the
// value it stored. Reading the row from the source by key, as the reader
// did, finds it gone and gives [<nil> <nil> <nil>].
func TestGeneratedColumnsAfterTheRowChanged(t *testing.T) {
	e := newEnv(t, "public.g")
	e.exec(`CREATE TABLE g (tenant_id text, id int, v int, dbl int GENERATED ALWAYS AS (v * 2) STORED, PRIMARY KEY (tenant_id, id))`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	run.stop(t) // the slot keeps what follows until the next reader
	e.exec(`INSERT INTO g (tenant_id, id, v) VALUES ('t', 1, 5)`)
	e.exec(`UPDATE g SET v = 7 WHERE id = 1`)
	e.exec(`DELETE FROM g WHERE id = 1`)
	e.start(e.newReader("b", nil))
	rows := waitRows(t, e, 3)
	if got := generatedOf(rows, "dbl"); got != "[10 14 <nil>]" {
		t.Errorf("dbl in insert, update, delete: %s; want [10 14 <nil>]", got)
	}
}

// A generated column that reads only a TOASTed column an update leaves
// unchanged is unchanged too (its expression is immutable): it is marked
// unchanged like the column, never NULL; one that reads other columns is
// evaluated.
func TestGeneratedColumnOfUnchangedTOAST(t *testing.T) {
	e := newEnv(t, "public.g")
	e.exec(`CREATE TABLE g (tenant_id text, id int, v int, body text, blen int GENERATED ALWAYS AS (length(body)) STORED,
		dbl int GENERATED ALWAYS AS (v * 2) STORED, PRIMARY KEY (tenant_id, id));
		ALTER TABLE g ALTER COLUMN body SET STORAGE EXTERNAL`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO g (tenant_id, id, v, body) VALUES ('t', 1, 5, repeat('x', 100000))`)
	e.exec(`UPDATE g SET v = 7 WHERE id = 1`)
	rows := waitRows(t, e, 2)
	if got := generatedOf(rows, "blen"); got != "[100000 <nil>]" {
		t.Errorf("blen in insert, update: %s; want [100000 <nil>]", got)
	}
	if got := generatedOf(rows, "dbl"); got != "[10 14]" {
		t.Errorf("dbl in insert, update: %s; want [10 14]", got)
	}
	if u := rows[1].unchanged; !slices.Contains(u, "body") || !slices.Contains(u, "blen") || slices.Contains(u, "dbl") {
		t.Errorf("update's unchanged columns %v; want body and blen", u)
	}
}
