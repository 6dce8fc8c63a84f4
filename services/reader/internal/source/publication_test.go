package source

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pubDB is a fresh source database with two plain tables, a partitioned
// one with a partition, and a table in another schema.
func pubDB(t *testing.T) (*pgx.Conn, int) {
	t.Helper()
	dsn := pgtest.NewDB(t)
	pgtest.Exec(t, dsn, `CREATE TABLE a (tenant_id text, id int, v int, PRIMARY KEY (tenant_id, id));
		CREATE TABLE b (tenant_id text, id int, v int, PRIMARY KEY (tenant_id, id));
		CREATE TABLE p (tenant_id text, id int, PRIMARY KEY (tenant_id, id)) PARTITION BY LIST (tenant_id);
		CREATE TABLE p1 PARTITION OF p FOR VALUES IN ('t1');
		CREATE SCHEMA other;
		CREATE TABLE other.c (tenant_id text, id int, PRIMARY KEY (tenant_id, id));`)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var v int
	if err := conn.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return conn, v
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestPublicationRefused: a publication the user made (no marker) that
// captures a subset of a configured table is refused with an error naming
// the publication, the table, what is wrong and the SQL that fixes it; it
// is left as it is; and running that SQL makes it pass.
func TestPublicationRefused(t *testing.T) {
	tables := []string{"public.a", "public.b"}
	cases := []struct {
		name  string
		min   int // server_version_num it needs
		setup string
		table string
		want  string // in the error
	}{
		{"row filter", 150000, `CREATE PUBLICATION pub FOR TABLE a WHERE (v > 1), b`, "public.a", "row filter, WHERE (v > 1)"},
		{"column list", 150000, `CREATE PUBLICATION pub FOR TABLE a, b (tenant_id, id)`, "public.b", "column list, (tenant_id, id)"},
		{"publish subset", 0, `CREATE PUBLICATION pub FOR TABLE a, b WITH (publish = 'insert')`, "public.a", "does not publish delete, truncate, update"},
		{"publish without truncate", 0, `CREATE PUBLICATION pub FOR TABLE a, b WITH (publish = 'insert, update, delete')`, "public.b", "does not publish truncate"},
		{"missing table", 0, `CREATE PUBLICATION pub FOR TABLE a`, "public.b", "not in the publication"},
		{"schema publication of another schema", 150000, `CREATE PUBLICATION pub FOR TABLES IN SCHEMA other, TABLE a`, "public.b", "not in the publication"},
		{"schema publication with a publish subset", 150000, `CREATE PUBLICATION pub FOR TABLES IN SCHEMA public WITH (publish = 'insert, update')`, "public.a", "does not publish delete, truncate"},
		{"all tables with a publish subset", 0, `CREATE PUBLICATION pub FOR ALL TABLES WITH (publish = 'insert, update, delete')`, "public.b", "does not publish truncate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, v := pubDB(t)
			if v < tc.min {
				t.Skipf("needs server_version_num %d, have %d", tc.min, v)
			}
			ctx := context.Background()
			mustExec(t, conn, tc.setup)
			_, err := EnsurePublication(ctx, conn, "pub", tables)
			if !errors.Is(err, ErrInvalidSource) {
				t.Fatalf("EnsurePublication = %v, want ErrInvalidSource", err)
			}
			msg := err.Error()
			for _, w := range []string{"publication pub", "table " + tc.table, tc.want, `ALTER PUBLICATION "pub"`, "COMMENT ON PUBLICATION"} {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q: %s", w, msg)
				}
			}
			// Left as it was: the same problems again.
			before, _ := CheckPublication(ctx, conn, "pub", tables)
			if len(before.Problems) == 0 || before.Owned {
				t.Fatalf("the user's publication was changed: %+v", before)
			}
			// The SQL the error names fixes it.
			for _, p := range before.Problems {
				mustExec(t, conn, p.Fix)
			}
			after, err := CheckPublication(ctx, conn, "pub", tables)
			if err != nil || len(after.Problems) > 0 {
				t.Fatalf("after running the fixes: %v %v", after.Problems, err)
			}
			if _, err := EnsurePublication(ctx, conn, "pub", tables); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPublicationAccepted: publications that publish every change of every
// configured table as the table itself pass, whichever way they list it.
func TestPublicationAccepted(t *testing.T) {
	tables := []string{"public.a", "public.b", "public.p"}
	cases := []struct {
		name, setup string
		min         int
	}{
		{"for table", `CREATE PUBLICATION pub FOR TABLE a, b, p WITH (publish_via_partition_root = true)`, 0},
		{"for all tables", `CREATE PUBLICATION pub FOR ALL TABLES WITH (publish_via_partition_root = true)`, 0},
		{"schema publication", `CREATE PUBLICATION pub FOR TABLES IN SCHEMA public WITH (publish_via_partition_root = true)`, 150000},
		{"schema and table", `CREATE PUBLICATION pub FOR TABLES IN SCHEMA other, TABLE a, b, p WITH (publish_via_partition_root = true)`, 150000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, v := pubDB(t)
			if v < tc.min {
				t.Skipf("needs server_version_num %d, have %d", tc.min, v)
			}
			mustExec(t, conn, tc.setup)
			c, err := CheckPublication(context.Background(), conn, "pub", tables)
			if err != nil || !c.Exists || len(c.Problems) > 0 {
				t.Fatalf("CheckPublication = %+v, %v", c, err)
			}
		})
	}
}

// TestPublicationViaRoot: a partitioned table needs
// publish_via_partition_root (its changes come as its partitions'
// otherwise), and a captured partition must not be published as its
// ancestor.
func TestPublicationViaRoot(t *testing.T) {
	ctx := context.Background()
	t.Run("partitioned without via root", func(t *testing.T) {
		conn, _ := pubDB(t)
		mustExec(t, conn, `CREATE PUBLICATION pub FOR TABLE a, p`)
		_, err := EnsurePublication(ctx, conn, "pub", []string{"public.a", "public.p"})
		if !errors.Is(err, ErrInvalidSource) || !strings.Contains(err.Error(), "table public.p: it is partitioned and publish_via_partition_root is off") ||
			!strings.Contains(err.Error(), `ALTER PUBLICATION "pub" SET (publish_via_partition_root = true)`) {
			t.Fatalf("EnsurePublication = %v", err)
		}
		mustExec(t, conn, `ALTER PUBLICATION pub SET (publish_via_partition_root = true)`)
		if _, err := EnsurePublication(ctx, conn, "pub", []string{"public.a", "public.p"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("partition published as its ancestor", func(t *testing.T) {
		conn, _ := pubDB(t)
		mustExec(t, conn, `CREATE PUBLICATION pub FOR TABLE p, a WITH (publish_via_partition_root = true)`)
		_, err := EnsurePublication(ctx, conn, "pub", []string{"public.a", "public.p1"})
		if !errors.Is(err, ErrInvalidSource) || !strings.Contains(err.Error(), "table public.p1: it is a partition and publish_via_partition_root is on, so its changes are published as its ancestor public.p's") {
			t.Fatalf("EnsurePublication = %v", err)
		}
		// Without via root the partition is published as itself.
		mustExec(t, conn, `ALTER PUBLICATION pub SET (publish_via_partition_root = false)`)
		if _, err := EnsurePublication(ctx, conn, "pub", []string{"public.a", "public.p1"}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPublicationRepaired: a publication sluice created (its comment) is
// repaired in place, and the tables whose capture was a subset are
// returned for a copy.
func TestPublicationRepaired(t *testing.T) {
	ctx := context.Background()
	tables := []string{"public.a", "public.b", "public.p"}
	conn, v := pubDB(t)
	ens, err := EnsurePublication(ctx, conn, "pub", tables)
	if err != nil || !ens.Created {
		t.Fatalf("creating: %+v %v", ens, err)
	}
	c, err := CheckPublication(ctx, conn, "pub", tables)
	if err != nil || !c.Owned || len(c.Problems) > 0 {
		t.Fatalf("created publication: %+v %v", c, err)
	}
	alter := `ALTER PUBLICATION pub SET (publish = 'insert', publish_via_partition_root = false);
		ALTER PUBLICATION pub DROP TABLE b;`
	wantRepaired := []string{"public.a", "public.p"}
	if v >= 150000 {
		alter += `ALTER PUBLICATION pub DROP TABLE a; ALTER PUBLICATION pub ADD TABLE a (tenant_id, id) WHERE (v > 0);`
	}
	mustExec(t, conn, alter)
	ens, err = EnsurePublication(ctx, conn, "pub", tables)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ens.Added, ",") != "public.b" || strings.Join(ens.Repaired, ",") != strings.Join(wantRepaired, ",") {
		t.Errorf("added %v, repaired %v; want [public.b], %v", ens.Added, ens.Repaired, wantRepaired)
	}
	c, err = CheckPublication(ctx, conn, "pub", tables)
	if err != nil || !c.Owned || len(c.Problems) > 0 {
		t.Fatalf("after the repair: %+v %v", c, err)
	}
	// A conflict sluice cannot repair by itself is refused even so.
	_, err = EnsurePublication(ctx, conn, "pub", []string{"public.p", "public.p1"})
	if !errors.Is(err, ErrInvalidSource) || !strings.Contains(err.Error(), "table public.p1: it is a partition") {
		t.Fatalf("partition and its root both captured: %v", err)
	}
}
