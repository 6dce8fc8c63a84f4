package reader

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgcluster"
)

// BenchmarkReader measures the reader against pg_recvlogical streaming the
// same WAL with pgoutput to a file, in the same run: rows/s and MB/s (of
// WAL decoded, and of CHANGES bodies), and the ratio of the two
// throughputs. Run it once: go test -run XXX -bench Reader -benchtime 1x.
func BenchmarkReader(b *testing.B) {
	narrow := `CREATE TABLE bench (tenant_id text, id bigint, v int, PRIMARY KEY (tenant_id, id))`
	narrowIns := `INSERT INTO bench SELECT 't' || mod(g, 50), g, g FROM generate_series(%d, %d) g`
	wide := `CREATE TABLE bench (tenant_id text, id bigint, a int, b bigint, c numeric, d double precision, e boolean,
		f text, g timestamptz, h date, i uuid, j jsonb, k text[], l varchar(40), m text, PRIMARY KEY (tenant_id, id))`
	wideIns := `INSERT INTO bench SELECT 't' || mod(g, 50), g, g, g * 1000, g * 1.25, g / 3.0, mod(g, 2) = 0,
		'some text value ' || g, now(), current_date, gen_random_uuid(), jsonb_build_object('k', g, 's', 'x'),
		ARRAY['a', 'b', g::text], 'v' || g, repeat('m', 100) FROM generate_series(%d, %d) g`
	cases := []struct {
		name, ddl, ins string
		rows, perTx    int
	}{
		{"narrow/small-tx", narrow, narrowIns, 100000, 10},
		{"narrow/huge-tx", narrow, narrowIns, 200000, 200000},
		{"wide/small-tx", wide, wideIns, 30000, 10},
		{"wide/huge-tx", wide, wideIns, 60000, 60000},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				benchOnce(b, c.ddl, c.ins, c.rows, c.perTx)
			}
		})
	}
}

// benchRounds: each side reads the WAL this many times (from its own slot)
// and the best round counts, which keeps the noise of a shared machine out.
const benchRounds = 3

func benchOnce(b *testing.B, ddl, ins string, rows, perTx int) {
	e := newEnv(b, "public.bench")
	e.alloc = memory.DefaultAllocator // what production uses
	e.cfg.Reader.StatusInterval = 100 * time.Millisecond
	e.exec(ddl + "; CREATE PUBLICATION " + e.cfg.Source.Publication + " FOR TABLE bench")
	// Every slot exists before the data is written: each reads the same WAL.
	for i := 0; i < benchRounds; i++ {
		e.exec(fmt.Sprintf(`SELECT pg_create_logical_replication_slot('reader%d', 'pgoutput'), pg_create_logical_replication_slot('recv%d', 'pgoutput')`, i, i))
	}
	start := currentLSN(b, e.dsn)
	if perTx < rows {
		// Many small transactions from one statement: a DO block commits.
		tmpl := strings.ReplaceAll(ins, "%d", "%s")
		e.exec(fmt.Sprintf(`DO $$ BEGIN FOR i IN 0..%d LOOP EXECUTE format(%s, 1 + i*%d, (i+1)*%d); COMMIT; END LOOP; END $$`,
			rows/perTx-1, quoteLit(tmpl), perTx, perTx))
	} else {
		e.exec(fmt.Sprintf(ins, 1, rows))
	}
	end := currentLSN(b, e.dsn)
	walMB := float64(end-start) / 1e6
	bindir, err := pgcluster.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	recv, took := time.Duration(1<<62), time.Duration(1<<62)
	var outMB, arrowMB float64
	var msgs int
	for i := 0; i < benchRounds; i++ {
		// pg_recvlogical, to a file, until the end LSN.
		out := filepath.Join(b.TempDir(), "recv.out")
		t0 := time.Now()
		cmd := exec.Command(filepath.Join(bindir, "pg_recvlogical"), "-d", e.dsn, "--slot", fmt.Sprintf("recv%d", i), "--start",
			"-o", "proto_version=1", "-o", "publication_names="+e.cfg.Source.Publication, "-E", end.String(), "-f", out, "--no-loop")
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("pg_recvlogical: %v: %s", err, o)
		}
		recv = min(recv, time.Since(t0))
		fi, _ := os.Stat(out)
		outMB = float64(fi.Size()) / 1e6

		// The reader, from its slot, into an empty CHANGES stream, until
		// JetStream acked every row. Its clock starts when its replication
		// session starts (after the lease, validation and stream set-up,
		// which pg_recvlogical does not do).
		ctx := context.Background()
		_ = e.js.DeleteStream(ctx, proto.StreamChanges)
		e.cfg.Source.Slot = fmt.Sprintf("reader%d", i)
		run := e.start(e.newReader("bench", nil))
		for run.r.Status().State != "streaming" {
			time.Sleep(100 * time.Microsecond)
		}
		t0 = time.Now()
		for run.r.Status().Rows["public.bench"] < int64(rows) { // published and acked
			if time.Since(t0) > 10*time.Minute {
				b.Fatal("reader did not finish")
			}
			time.Sleep(200 * time.Microsecond)
		}
		took = min(took, time.Since(t0))
		run.stop(b)
		_, _, ms := e.changes()
		var bodies int64
		for _, m := range ms {
			bodies += int64(len(m.Data))
		}
		arrowMB, msgs = float64(bodies)/1e6, len(ms)
	}
	b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
	b.ReportMetric(walMB/took.Seconds(), "WAL-MB/s")
	b.ReportMetric(arrowMB/took.Seconds(), "arrow-MB/s")
	b.ReportMetric(float64(rows)/recv.Seconds(), "recvlogical-rows/s")
	b.ReportMetric(recv.Seconds()/took.Seconds(), "ratio")
	b.Logf("%d rows, %.1f MB WAL, best of %d: reader %s (%d msgs, %.1f MB Arrow) = %.0f rows/s %.1f WAL-MB/s; pg_recvlogical %s (%.1f MB out) = %.0f rows/s; ratio %.2f",
		rows, walMB, benchRounds, took.Round(time.Millisecond), msgs, arrowMB, float64(rows)/took.Seconds(), walMB/took.Seconds(),
		recv.Round(time.Millisecond), outMB, float64(rows)/recv.Seconds(), recv.Seconds()/took.Seconds())
}

func quoteLit(s string) string {
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += "''"
		} else {
			out += string(r)
		}
	}
	return out + "'"
}

func currentLSN(b testing.TB, dsn string) proto.LSN {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		b.Fatal(err)
	}
	l, _ := proto.ParseLSN(s)
	return l
}
