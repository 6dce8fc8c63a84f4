package reader

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
)

// Streamed transactions (source.protocol 2, capture/spill.go): the tests
// make Postgres stream every transaction past 64 kB of changes
// (logical_decoding_work_mem on the test database, read by the walsender
// at its start; on 16 and later also debug_logical_replication_streaming
// = immediate, which streams every change). Each asserts that the
// transaction did stream before its commit (the spill held it, the
// streamed-transaction counter moved), which the protocol 1 path never
// shows, and what arrives.

// forceStreaming sets the streaming thresholds on the test database; a
// reader started afterwards streams.
func forceStreaming(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var db string
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_database(), current_setting('server_version_num')::int`).Scan(&db, &num); err != nil {
		t.Fatal(err)
	}
	if num < 140000 {
		t.Skipf("Postgres %d streams no in-progress transaction", num)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s SET logical_decoding_work_mem = '64kB'`, pgx.Identifier{db}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	if num >= 160000 {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s SET debug_logical_replication_streaming = immediate`, pgx.Identifier{db}.Sanitize())); err != nil {
			t.Fatal(err)
		}
	}
}

// txConn is a source connection holding a transaction open.
func txConn(t *testing.T, e *env) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func txExec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// insertRows inserts ids from..to of tenant with 200-byte values.
func insertSQL(tenant string, from, to int) string {
	return fmt.Sprintf(`INSERT INTO items SELECT '%s', g, repeat(md5(g::text), 6) FROM generate_series(%d, %d) g`, tenant, from, to)
}

// waitSpilled waits until the reader holds at least n bytes of streamed
// transactions on disk (and open transactions, when txns > 0).
func waitSpilled(t *testing.T, run *running, n int64, txns int) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		st := run.r.Status()
		if st.SpillBytes < n || st.StreamingTxns < txns {
			return fmt.Errorf("spill %d bytes in %d transactions, want %d in %d (did the transaction stream?)", st.SpillBytes, st.StreamingTxns, n, txns)
		}
		return nil
	})
}

// waitMarker inserts a committed marker row and waits until it arrives;
// it returns every row of CHANGES.
func waitMarker(t *testing.T, e *env, id int) []row {
	t.Helper()
	e.exec(fmt.Sprintf(`INSERT INTO items VALUES ('marker', %d, 'end')`, id))
	var rows []row
	eventually(t, 60*time.Second, func() error {
		rows, _, _ = e.changes()
		for _, r := range rows {
			if r.vals["tenant_id"] == "marker" && r.vals["id"] == int64(id) {
				return nil
			}
		}
		return fmt.Errorf("marker %d not streamed", id)
	})
	return rows
}

// byTenant counts rows per tenant, fails on a position seen twice, and
// returns each tenant's rows in stream order.
func byTenant(t *testing.T, rows []row) map[string][]row {
	t.Helper()
	seen := map[proto.Position]row{}
	out := map[string][]row{}
	for _, r := range rows {
		if was, ok := seen[r.pos]; ok {
			t.Fatalf("position %s twice: %v and %v", r.pos, was, r)
		}
		seen[r.pos] = r
		ten := r.vals["tenant_id"].(string)
		out[ten] = append(out[ten], r)
	}
	return out
}

// checkTx checks that rows are one transaction's, at one commit LSN, with
// the ordinals 1..len(rows) protocol 1 gives.
func checkTx(t *testing.T, what string, rows []row) proto.LSN {
	t.Helper()
	if len(rows) == 0 {
		t.Fatalf("%s: no rows", what)
	}
	lsn := rows[0].pos.LSN
	for i, r := range rows {
		if r.pos.LSN != lsn || r.pos.Seq != uint64(i+1) {
			t.Fatalf("%s: row %d at %s, want %s/%d", what, i, r.pos, lsn, i+1)
		}
	}
	return lsn
}

func streamedCount(run *running, event string) float64 {
	return testutil.ToFloat64(run.r.metrics.StreamedTxns.WithLabelValues(event))
}

// A streamed transaction arrives whole, once, at its commit LSN with the
// ordinals of protocol 1; it was on the reader's disk before its commit and
// nothing of it was published before. protocol=1: the same transaction is
// never streamed (the control: the test's streaming assertions fail there).
func TestStreamedTransaction(t *testing.T) {
	for _, protocol := range []int{2, 1} {
		t.Run(fmt.Sprintf("protocol=%d", protocol), func(t *testing.T) {
			e := newEnv(t, "public.items")
			e.cfg.Source.Protocol = protocol
			e.exec(schemaSQL)
			forceStreaming(t, e)
			run := e.start(e.newReader("a", nil))
			waitStreaming(t, run)

			c := txConn(t, e)
			txExec(t, c, "BEGIN")
			txExec(t, c, insertSQL("big", 1, 3000))
			txExec(t, c, `UPDATE items SET v = 'updated' WHERE tenant_id = 'big' AND id <= 10`)
			txExec(t, c, `DELETE FROM items WHERE tenant_id = 'big' AND id > 2990`)
			if protocol == 2 {
				waitSpilled(t, run, 500<<10, 1)
			} else {
				time.Sleep(time.Second) // what protocol 2 took to spill
				if st := run.r.Status(); st.SpillBytes != 0 || streamedCount(run, "started") != 0 {
					t.Fatalf("protocol 1 spilled %d bytes", st.SpillBytes)
				}
			}
			if rows, _, _ := e.changes(); len(rows) != 0 {
				t.Fatalf("%d rows published before the commit", len(rows))
			}
			txExec(t, c, "COMMIT")
			rows := byTenant(t, waitMarker(t, e, 1))["big"]
			if len(rows) != 3000+10+10 {
				t.Fatalf("%d rows of the transaction, want 3020", len(rows))
			}
			checkTx(t, "big", rows)
			for i, r := range rows {
				want := int8(proto.OpInsert)
				if i >= 3000 && i < 3010 {
					want = proto.OpUpdate
				} else if i >= 3010 {
					want = proto.OpDelete
				}
				if r.op != want {
					t.Fatalf("row %d: op %d, want %d", i, r.op, want)
				}
			}
			st := run.r.Status()
			if protocol == 2 && (streamedCount(run, "committed") < 1 || st.SpillBytes != 0 || st.StreamingTxns != 0) {
				t.Fatalf("after the commit: %v committed, spill %d bytes in %d", streamedCount(run, "committed"), st.SpillBytes, st.StreamingTxns)
			}
			if protocol == 1 && streamedCount(run, "committed") != 0 {
				t.Fatalf("protocol 1 streamed")
			}
		})
	}
}

// An aborted streamed transaction leaves nothing, and its spill is gone.
func TestStreamedAbort(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL)
	forceStreaming(t, e)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	c := txConn(t, e)
	txExec(t, c, "BEGIN")
	txExec(t, c, insertSQL("aborted", 1, 3000))
	waitSpilled(t, run, 500<<10, 1)
	txExec(t, c, "ROLLBACK")
	rows := waitMarker(t, e, 1)
	if n := len(byTenant(t, rows)["aborted"]); n != 0 {
		t.Fatalf("%d rows of the aborted transaction arrived", n)
	}
	eventually(t, 10*time.Second, func() error {
		if st := run.r.Status(); st.SpillBytes != 0 || st.StreamingTxns != 0 || streamedCount(run, "aborted") < 1 {
			return fmt.Errorf("spill %d bytes in %d transactions, %v aborted", st.SpillBytes, st.StreamingTxns, streamedCount(run, "aborted"))
		}
		return nil
	})
	if ents, _ := os.ReadDir(e.cfg.ReaderSpillDir()); len(ents) != 0 {
		t.Fatalf("spill files left: %v", ents)
	}
}

// A rolled-back savepoint inside a streamed transaction leaves nothing of
// it, and the rest of the transaction arrives with the ordinals protocol 1
// gives. unsafe=true (ReplayAbortedForTest, SLUICE_UNSAFE_REPLAY_ABORTED):
// the rolled-back rows arrive.
func TestStreamedSavepointRollback(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsafe=%v", unsafe), func(t *testing.T) {
			e := newEnv(t, "public.items")
			e.exec(schemaSQL)
			forceStreaming(t, e)
			run := e.start(e.newReader("a", func(r *Reader) { r.rules.replayAborted = unsafe }))
			waitStreaming(t, run)
			c := txConn(t, e)
			txExec(t, c, "BEGIN")
			txExec(t, c, insertSQL("kept", 1, 1000))
			txExec(t, c, "SAVEPOINT s1")
			txExec(t, c, insertSQL("rolledback", 1, 3000))
			// Its changes streamed (the rollback then sends Stream Abort of
			// the subtransaction), not just discarded by the server.
			waitSpilled(t, run, 700<<10, 1)
			txExec(t, c, "ROLLBACK TO SAVEPOINT s1")
			txExec(t, c, "SAVEPOINT s2")
			txExec(t, c, insertSQL("kept", 1001, 1500))
			txExec(t, c, "RELEASE SAVEPOINT s2")
			txExec(t, c, insertSQL("kept", 1501, 2000))
			txExec(t, c, "COMMIT")
			got := byTenant(t, waitMarker(t, e, 1))
			if n := len(got["kept"]); n != 2000 {
				t.Fatalf("%d rows of the committed part, want 2000", n)
			}
			if streamedCount(run, "subxact_aborted") < 1 {
				t.Fatalf("no subtransaction abort was streamed")
			}
			if unsafe {
				if len(got["rolledback"]) == 0 {
					t.Fatal("negative control: with the aborted subtransaction replayed, its rows should arrive")
				}
				t.Logf("negative control: %d rolled-back rows arrived", len(got["rolledback"]))
				return
			}
			if n := len(got["rolledback"]); n != 0 {
				t.Fatalf("%d rows of the rolled-back savepoint arrived", n)
			}
			checkTx(t, "kept", got["kept"])
		})
	}
}

// Two streamed transactions, interleaved on the server, arrive in commit
// order, each whole at its own commit LSN.
func TestStreamedInterleaved(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL)
	forceStreaming(t, e)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	a, b := txConn(t, e), txConn(t, e)
	txExec(t, a, "BEGIN")
	txExec(t, b, "BEGIN")
	for i := 0; i < 6; i++ {
		txExec(t, a, insertSQL("a", i*500+1, i*500+500))
		txExec(t, b, insertSQL("b", i*500+1, i*500+500))
	}
	waitSpilled(t, run, 1<<20, 2)
	txExec(t, b, "COMMIT") // b first
	txExec(t, a, "COMMIT")
	rows := waitMarker(t, e, 1)
	got := byTenant(t, rows)
	la, lb := checkTx(t, "a", got["a"]), checkTx(t, "b", got["b"])
	if len(got["a"]) != 3000 || len(got["b"]) != 3000 {
		t.Fatalf("a %d rows, b %d, want 3000 each", len(got["a"]), len(got["b"]))
	}
	if lb >= la {
		t.Fatalf("b committed first at %s, a at %s", lb, la)
	}
	// In CHANGES, every row of b before every row of a.
	lastB, firstA := -1, len(rows)
	for i, r := range rows {
		switch r.vals["tenant_id"] {
		case "b":
			lastB = i
		case "a":
			firstA = min(firstA, i)
		}
	}
	if lastB > firstA {
		t.Fatalf("a row of a (at %d) before the last row of b (at %d)", firstA, lastB)
	}
	if n := streamedCount(run, "committed"); n < 2 { // on 16+ (immediate) the marker's too
		t.Fatalf("%v streamed transactions committed, want at least 2", n)
	}
}

// A reader killed while a transaction streams, and again while it
// publishes the committed transaction, loses nothing and duplicates
// nothing: the stream resends the transaction from the slot's restart
// point, the new session removes the spill files it finds (a killed
// process leaves them), and the positions and batches are the same, so the
// republished batches are deduplicated.
func TestStreamedKillResume(t *testing.T) {
	e := newEnv(t, "public.items")
	e.cfg.Reader.BatchRows = 200
	e.exec(schemaSQL)
	forceStreaming(t, e)
	run := e.start(e.newReader("k", nil))
	waitStreaming(t, run)
	e.exec(insertSQL("before", 1, 100))

	c := txConn(t, e)
	txExec(t, c, "BEGIN")
	txExec(t, c, insertSQL("big", 1, 3000))
	waitSpilled(t, run, 500<<10, 1)
	e.kill(run)
	// What kill -9 leaves: a spill file the next session must not read.
	dir := e.cfg.ReaderSpillDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "xid-1"+".pgoutput-spill")
	if err := os.WriteFile(stale, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The second reader publishes slowly, so that the kill lands in the
	// middle of the committed transaction's replay.
	run = e.start(e.newReader("k", func(r *Reader) {
		r.publishHook = func(real capture.PublishFunc) capture.PublishFunc {
			return func(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
				time.Sleep(100 * time.Millisecond)
				return real(msg, opts...)
			}
		}
	}))
	waitStreaming(t, run)
	txExec(t, c, insertSQL("big", 3001, 6000))
	eventually(t, 30*time.Second, func() error {
		if _, err := os.Stat(stale); err == nil {
			return fmt.Errorf("stale spill file still there")
		}
		return nil
	})
	waitSpilled(t, run, 1<<20, 1)
	// Kill the second reader once it published part of the committed
	// transaction.
	txExec(t, c, "COMMIT")
	eventually(t, 60*time.Second, func() error {
		rows, _, _ := e.changes()
		n := 0
		for _, r := range rows {
			if r.vals["tenant_id"] == "big" {
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("nothing of the transaction published yet")
		}
		return nil
	})
	e.kill(run)
	rowsAtKill, _, _ := e.changes()
	if n := len(byTenant(t, rowsAtKill)["big"]); n == 0 || n >= 6000 {
		t.Fatalf("%d rows of the transaction published when the second reader was killed: the kill is not mid-replay", n)
	}

	run = e.start(e.newReader("k", nil))
	waitStreaming(t, run)
	got := byTenant(t, waitMarker(t, e, 1))
	if len(got["before"]) != 100 || len(got["big"]) != 6000 {
		t.Fatalf("before %d rows (want 100), big %d (want 6000)", len(got["before"]), len(got["big"]))
	}
	checkTx(t, "big", got["big"])
	t.Logf("%d rows of the transaction in CHANGES when the second reader was killed; the third session streamed it again: %v",
		len(byTenant(t, rowsAtKill)["big"]), streamedCount(run, "committed"))
	var leftovers []string
	ents, _ := os.ReadDir(dir)
	for _, en := range ents {
		leftovers = append(leftovers, en.Name())
	}
	if len(leftovers) != 0 {
		t.Fatalf("spill files left after the commit: %s", strings.Join(leftovers, ", "))
	}
}

// What a rolled-back savepoint sent is left out with it, its Relation
// messages too: the table's first change in the session in a savepoint
// rolled back (pgoutput sends the table's schema there, with the
// savepoint's xid, and again after the Stream Abort), and a column added
// in a savepoint rolled back (its schema must never reach a batch, nor the
// schema-change check: no resync). A column added in the streamed
// transaction itself streams with it and holds for the plain transactions
// after it.
func TestStreamedRelationOfRolledBackSavepoint(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL)
	forceStreaming(t, e)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	c := txConn(t, e)
	txExec(t, c, "BEGIN")
	txExec(t, c, "SAVEPOINT s1")
	txExec(t, c, insertSQL("rolledback", 1, 3000))
	waitSpilled(t, run, 500<<10, 1)
	txExec(t, c, "ROLLBACK TO SAVEPOINT s1")
	txExec(t, c, insertSQL("kept", 1, 2000))
	txExec(t, c, "SAVEPOINT s2")
	txExec(t, c, "ALTER TABLE items ADD COLUMN gone int DEFAULT 5")
	txExec(t, c, `INSERT INTO items (tenant_id, id, v, gone) SELECT 'rolledback', g, repeat('z', 200), g FROM generate_series(5001, 8000) g`)
	waitSpilled(t, run, 1200<<10, 1)
	txExec(t, c, "ROLLBACK TO SAVEPOINT s2")
	txExec(t, c, "ALTER TABLE items ADD COLUMN extra int")
	txExec(t, c, `INSERT INTO items (tenant_id, id, v, extra) SELECT 'kept', g, repeat('y', 200), g FROM generate_series(2001, 3000) g`)
	txExec(t, c, "COMMIT")
	e.exec(`INSERT INTO items (tenant_id, id, v, extra) VALUES ('plain', 1, 'after', 42)`)
	got := byTenant(t, waitMarker(t, e, 1))
	if st := run.r.Status(); st.LastError != "" {
		t.Fatalf("reader: %s", st.LastError)
	}
	if len(got["rolledback"]) != 0 || len(got["kept"]) != 3000 {
		t.Fatalf("rolled back %d rows (want 0), kept %d (want 3000)", len(got["rolledback"]), len(got["kept"]))
	}
	checkTx(t, "kept", got["kept"])
	if v := got["kept"][2999].vals["extra"]; v != int64(3000) {
		t.Fatalf("the last kept row's extra is %v (%T), want 3000", v, v)
	}
	if _, has := got["kept"][0].vals["extra"]; has {
		t.Fatalf("a row before the ALTER carries extra: %v", got["kept"][0])
	}
	for _, ten := range []string{"kept", "plain", "marker"} {
		for _, r := range got[ten] {
			if _, has := r.vals["gone"]; has {
				t.Fatalf("a row carries the rolled-back column: %v", r)
			}
		}
	}
	if p := got["plain"]; len(p) != 1 || p[0].vals["extra"] != int64(42) {
		t.Fatalf("the plain transaction after it: %v", p)
	}
	if n := testutil.CollectAndCount(run.r.metrics.AutoResyncs); n != 0 {
		t.Fatalf("%d resyncs queued for a schema change rolled back", n)
	}
}

// While a transaction streams, the reader goes on confirming the plain
// transactions that commit meanwhile, past the streamed one's first
// changes (what it confirms is prefix-complete over what it published;
// nothing of the streamed one is). Killed then, the next session still
// receives the streamed transaction whole: Postgres decodes again from the
// slot's restart point, which it keeps before the oldest open transaction.
func TestStreamedConfirmsAroundOpenTransaction(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL)
	forceStreaming(t, e)
	run := e.start(e.newReader("k", nil))
	waitStreaming(t, run)
	c := txConn(t, e)
	txExec(t, c, "BEGIN")
	txExec(t, c, insertSQL("big", 1, 3000))
	waitSpilled(t, run, 500<<10, 1)
	e.exec(`INSERT INTO items VALUES ('plain', 1, 'meanwhile')`)
	after := currentLSN(t, e.dsn)
	eventually(t, 30*time.Second, func() error {
		var confirmed string
		pgConn, err := pgx.Connect(context.Background(), e.dsn)
		if err != nil {
			return err
		}
		defer pgConn.Close(context.Background())
		if err := pgConn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Source.Slot).Scan(&confirmed); err != nil {
			return err
		}
		if l, _ := proto.ParseLSN(confirmed); l < after {
			return fmt.Errorf("slot confirmed %s, want past the plain commit (%s)", confirmed, after)
		}
		return nil
	})
	if st := run.r.Status(); st.StreamingTxns != 1 {
		t.Fatalf("%d streaming transactions, want the open one", st.StreamingTxns)
	}
	e.kill(run)
	txExec(t, c, insertSQL("big", 3001, 4000))
	txExec(t, c, "COMMIT")
	run = e.start(e.newReader("k", nil))
	waitStreaming(t, run)
	got := byTenant(t, waitMarker(t, e, 1))
	if len(got["big"]) != 4000 || len(got["plain"]) != 1 {
		t.Fatalf("big %d rows (want 4000), plain %d (want 1)", len(got["big"]), len(got["plain"]))
	}
	checkTx(t, "big", got["big"])
	if got["plain"][0].pos.LSN >= got["big"][0].pos.LSN {
		t.Fatalf("the plain transaction at %s, after the streamed one at %s", got["plain"][0].pos, got["big"][0].pos)
	}
}
