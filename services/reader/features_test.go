package reader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

func waitStreaming(t *testing.T, run *running) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		if s := run.r.Status().State; s != "streaming" {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
}

// waitHalted waits until the reader shows table halted for a reason
// containing want.
func waitHalted(t *testing.T, run *running, table, want string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if h := run.r.Status().Halted[table]; !strings.Contains(h, want) {
			return fmt.Errorf("%s not halted for %q: %q", table, want, h)
		}
		return nil
	})
}

func waitRows(t *testing.T, e *env, n int) []row {
	t.Helper()
	var rows []row
	eventually(t, 20*time.Second, func() error {
		rows, _, _ = e.changes()
		if len(rows) < n {
			return fmt.Errorf("%d rows, want %d", len(rows), n)
		}
		return nil
	})
	return rows
}

// An unchanged TOASTed value never becomes NULL downstream: with the
// default identity it is NULL and named in _sluice_unchanged; with
// REPLICA IDENTITY FULL it is taken from the old tuple.
func TestTOASTUnchanged(t *testing.T) {
	e := newEnv(t, "public.docs", "public.docs_full")
	e.exec(`CREATE TABLE docs (tenant_id text, id int, body text, n int, PRIMARY KEY (tenant_id, id));
		CREATE TABLE docs_full (tenant_id text, id int, body text, n int, PRIMARY KEY (tenant_id, id));
		ALTER TABLE docs_full REPLICA IDENTITY FULL;
		ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
		ALTER TABLE docs_full ALTER COLUMN body SET STORAGE EXTERNAL;`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	big := strings.Repeat("x", 100<<10)
	e.exec(`INSERT INTO docs VALUES ('t', 1, '` + big + `', 0); INSERT INTO docs_full VALUES ('t', 1, '` + big + `', 0);`)
	e.exec(`UPDATE docs SET n = 1; UPDATE docs_full SET n = 1;`)
	rows := waitRows(t, e, 4)
	var upd, updFull *row
	for i := range rows {
		if rows[i].op == proto.OpUpdate {
			if rows[i].table == "public.docs" {
				upd = &rows[i]
			} else {
				updFull = &rows[i]
			}
		}
	}
	if upd == nil || updFull == nil {
		t.Fatalf("updates missing: %v", rows)
	}
	if upd.vals["body"] != nil || len(upd.unchanged) != 1 || upd.unchanged[0] != "body" || upd.vals["n"] != int64(1) {
		t.Errorf("default identity: body=%d chars unchanged=%v n=%v; want NULL, [body], 1", len(fmt.Sprint(upd.vals["body"])), upd.unchanged, upd.vals["n"])
	}
	if updFull.vals["body"] != big || len(updFull.unchanged) != 0 {
		t.Errorf("FULL identity: body of %d chars, unchanged=%v; want the 100 KB value from the old tuple", len(fmt.Sprint(updFull.vals["body"])), updFull.unchanged)
	}
}

// A row that moves to another tenant with its TOASTed column unchanged lands
// in a destination that never held the value: without the old tuple the
// reader reads it from the source, so it never arrives as NULL (rule 6).
func TestTOASTUnchangedOnMove(t *testing.T) {
	e := newEnv(t, "public.docs")
	e.exec(`CREATE TABLE docs (tenant_id text, id int, body text, n int, PRIMARY KEY (tenant_id, id));
		ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	big := strings.Repeat("y", 100<<10)
	e.exec(`INSERT INTO docs VALUES ('t1', 1, '` + big + `', 0)`)
	e.exec(`UPDATE docs SET tenant_id = 't2', n = 1 WHERE id = 1`)
	rows := waitRows(t, e, 3)
	var moved *row
	for i := range rows {
		if rows[i].op == proto.OpUpdate {
			moved = &rows[i]
		}
	}
	if moved == nil {
		t.Fatalf("no update row: %v", rows)
	}
	if moved.vals["tenant_id"] != "t2" || moved.vals["body"] != big || len(moved.unchanged) != 0 {
		t.Errorf("moved row: tenant %v, body of %d chars, unchanged %v; want t2, the 100 KB value, none",
			moved.vals["tenant_id"], len(fmt.Sprint(moved.vals["body"])), moved.unchanged)
	}
}

// New columns switch the table to a new schema; a changed column kind halts
// only that table.
func TestSchemaChange(t *testing.T) {
	e := newEnv(t, "public.a", "public.b")
	e.exec(`CREATE TABLE a (tenant_id text, id int, PRIMARY KEY (tenant_id, id));
		CREATE TABLE b (tenant_id text, id int, x int, PRIMARY KEY (tenant_id, id));`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO a VALUES ('t', 1)`)
	e.exec(`ALTER TABLE a ADD COLUMN extra text; INSERT INTO a VALUES ('t', 2, 'e');`)
	e.exec(`ALTER TABLE a DROP COLUMN extra; INSERT INTO a VALUES ('t', 3);`)
	rows := waitRows(t, e, 3)
	if rows[0].schema == rows[1].schema || rows[1].schema == rows[2].schema {
		t.Errorf("schema fingerprints did not change: %s %s %s", rows[0].schema, rows[1].schema, rows[2].schema)
	}
	if rows[0].schema != rows[2].schema {
		t.Errorf("same columns, different fingerprint: %s vs %s", rows[0].schema, rows[2].schema)
	}
	if rows[1].vals["extra"] != "e" {
		t.Errorf("new column value %v", rows[1].vals["extra"])
	}
	e.exec(`INSERT INTO b VALUES ('t', 1, 1)`)
	e.exec(`ALTER TABLE b ALTER COLUMN x TYPE text; INSERT INTO b VALUES ('t', 2, 'two');`)
	e.exec(`INSERT INTO a VALUES ('t', 4)`)
	rows = waitRows(t, e, 5)
	waitHalted(t, run, "public.b", "type changed")
	for _, r := range rows {
		if r.table == "public.b" && r.vals["id"] == int64(2) {
			t.Errorf("a row of the halted table was published: %v", r)
		}
	}
}

// A TRUNCATE becomes one clear (proto.OpClear, every column NULL) per
// table it names, at its own position: a change of its transaction before
// it sits below the clear, one after it above; nothing halts. A multi-table
// TRUNCATE clears each table at one position; CASCADE clears the tables it
// reached (pgoutput names them).
func TestTruncateClears(t *testing.T) {
	e := newEnv(t, "public.a", "public.b")
	e.exec(`CREATE TABLE a (tenant_id text, id int, PRIMARY KEY (tenant_id, id));
		CREATE TABLE b (tenant_id text, id int, PRIMARY KEY (tenant_id, id), FOREIGN KEY (tenant_id, id) REFERENCES a);`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO a VALUES ('t', 1); INSERT INTO b VALUES ('t', 1);`)
	e.exec(`BEGIN; INSERT INTO a VALUES ('t', 2); TRUNCATE a CASCADE; INSERT INTO a VALUES ('t', 3); COMMIT;`)
	e.exec(`INSERT INTO b VALUES ('t', 3)`)
	e.exec(`TRUNCATE b, a RESTART IDENTITY`)
	e.exec(`INSERT INTO a VALUES ('t', 4)`)
	rows := waitRows(t, e, 10)
	var clears []row
	pos := map[string]proto.Position{}
	for _, r := range rows {
		t.Log(r)
		if r.op == proto.OpClear {
			clears = append(clears, r)
			for k, v := range r.vals {
				if v != nil {
					t.Errorf("clear of %s carries %s = %v", r.table, k, v)
				}
			}
			if !strings.HasPrefix(r.msgID, "x:"+r.table+":") {
				t.Errorf("clear of %s has id %s", r.table, r.msgID)
			}
			continue
		}
		pos[fmt.Sprintf("%s/%v", r.table, r.vals["id"])] = r.pos
	}
	if len(clears) != 4 {
		t.Fatalf("%d clears, want 4 (a and b by the CASCADE, b and a by the multi-table TRUNCATE)", len(clears))
	}
	first := clears[0].pos
	if clears[1].pos != first || !pos["public.a/2"].Less(first) || !first.Less(pos["public.a/3"]) || pos["public.a/2"].LSN != first.LSN {
		t.Errorf("the TRUNCATE inside the transaction is at %v, its changes at %v and %v", first, pos["public.a/2"], pos["public.a/3"])
	}
	second := clears[2].pos
	if clears[3].pos != second || !pos["public.b/3"].Less(second) || !second.Less(pos["public.a/4"]) {
		t.Errorf("the multi-table TRUNCATE is at %v and %v; b/3 at %v, a/4 at %v", second, clears[3].pos, pos["public.b/3"], pos["public.a/4"])
	}
	if h := run.r.Status().Halted; len(h) != 0 {
		t.Errorf("halted: %v", h)
	}
}

// A partitioned table's changes arrive as the table itself (the publication
// publishes via the partition root), including a move across partitions.
func TestPartitionedTable(t *testing.T) {
	e := newEnv(t, "public.pt")
	e.exec(`CREATE TABLE pt (tenant_id text NOT NULL, id int NOT NULL, v int, PRIMARY KEY (tenant_id, id)) PARTITION BY LIST (tenant_id);
		CREATE TABLE pt_a PARTITION OF pt FOR VALUES IN ('a');
		CREATE TABLE pt_rest PARTITION OF pt DEFAULT;`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO pt VALUES ('a', 1, 1), ('b', 2, 2)`)
	e.exec(`UPDATE pt SET tenant_id = 'a' WHERE id = 2`) // moves to pt_a
	e.exec(`DELETE FROM pt WHERE id = 1`)
	rows := waitRows(t, e, 5)
	var ops []string
	for _, r := range rows {
		if r.table != "public.pt" {
			t.Errorf("a change of %s, want public.pt: %v", r.table, r)
		}
		ops = append(ops, fmt.Sprintf("%d:%v:%v", r.op, r.vals["tenant_id"], r.vals["id"]))
	}
	want := []string{
		fmt.Sprintf("%d:a:1", proto.OpInsert), fmt.Sprintf("%d:b:2", proto.OpInsert),
		fmt.Sprintf("%d:b:2", proto.OpDelete), fmt.Sprintf("%d:a:2", proto.OpInsert),
		fmt.Sprintf("%d:a:1", proto.OpDelete),
	}
	if !slices.Equal(ops, want) {
		t.Errorf("changes (op:tenant:id) %v, want %v", ops, want)
	}
}

// A replica identity changed while the reader runs so that deletes no
// longer carry the routing column halts the table (its deletes and moves
// would reach no tenant); the other table goes on.
func TestIdentityChangeHalts(t *testing.T) {
	e := newEnv(t, "public.a", "public.b")
	e.exec(`CREATE TABLE a (tenant_id text, id int PRIMARY KEY); ALTER TABLE a REPLICA IDENTITY FULL;
		CREATE TABLE b (tenant_id text, id int PRIMARY KEY); ALTER TABLE b REPLICA IDENTITY FULL;`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO a VALUES ('t', 1); INSERT INTO b VALUES ('t', 1);`)
	e.exec(`ALTER TABLE a REPLICA IDENTITY DEFAULT`)
	e.exec(`DELETE FROM a WHERE id = 1; INSERT INTO b VALUES ('t', 2);`)
	rows := waitRows(t, e, 3)
	waitHalted(t, run, "public.a", "replica identity")
	for _, r := range rows {
		if r.table == "public.a" && r.op == proto.OpDelete {
			t.Errorf("a delete without its tenant was published: %v", r)
		}
	}
}

// A captured table renamed while the reader runs halts (its later changes
// would be lost in silence); the other table goes on. A dropped table:
// TestDroppedTableShownHalted.
func TestRenamedTableHalts(t *testing.T) {
	e := newEnv(t, "public.a", "public.c")
	e.exec(`CREATE TABLE a (tenant_id text, id int PRIMARY KEY); ALTER TABLE a REPLICA IDENTITY FULL;
		CREATE TABLE c (tenant_id text, id int PRIMARY KEY); ALTER TABLE c REPLICA IDENTITY FULL;`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO a VALUES ('t', 1); INSERT INTO c VALUES ('t', 1);`)
	e.exec(`ALTER TABLE a RENAME TO a2; INSERT INTO a2 VALUES ('t', 2);`)
	e.exec(`INSERT INTO c VALUES ('t', 2)`)
	waitRows(t, e, 3)
	waitHalted(t, run, "public.a", "renamed to public.a2")
}

// A captured table dropped at the source is shown halted (a DROP is not
// replicated, and a table created again under its name is not captured).
func TestDroppedTableShownHalted(t *testing.T) {
	e := newEnv(t, "public.a", "public.c")
	e.exec(`CREATE TABLE a (tenant_id text, id int PRIMARY KEY); ALTER TABLE a REPLICA IDENTITY FULL;
		CREATE TABLE c (tenant_id text, id int PRIMARY KEY); ALTER TABLE c REPLICA IDENTITY FULL;`)
	run := e.start(e.newReader("a", func(r *Reader) { r.pollEvery = 100 * time.Millisecond }))
	waitStreaming(t, run)
	e.exec(`DROP TABLE a; CREATE TABLE a (tenant_id text, id int PRIMARY KEY); INSERT INTO c VALUES ('t', 1);`)
	waitRows(t, e, 1)
	waitHalted(t, run, "public.a", "was dropped at the source")
	if h := run.r.Status().Halted["public.c"]; h != "" {
		t.Errorf("c shown halted: %q", h)
	}
}
