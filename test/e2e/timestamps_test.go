package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// timestampValues are timestamptz, timestamp and date values at the edges
// of what Postgres accepts (and of int64 microseconds since 1970, which end
// at 294247-01-10 04:00:54.775807): each row is (tz, ts, d).
var timestampValues = [][3]string{
	{"294276-12-31 23:59:59.999999+00", "294276-12-31 23:59:59.999999", "5874897-12-31"},
	{"294247-01-10 04:00:54.775807+00", "294247-01-10 04:00:54.775807", "294247-01-10"},
	{"294247-01-10 04:00:54.775808+00", "294250-06-15 12:00:00.5", "294276-12-31"},
	{"294247-01-10 04:00:54.775806+00", "294247-01-10 04:00:54.775806", "2026-01-01"},
	{"4714-11-24 00:00:00+00 BC", "4714-11-24 00:00:00 BC", "4714-11-24 BC"},
	{"0001-12-31 23:59:59.999999+00 BC", "0044-03-15 12:00:00 BC", "0001-01-01 BC"},
	{"infinity", "infinity", "infinity"},
	{"-infinity", "-infinity", "-infinity"},
}

// TestTimestampRangeEndToEnd: every timestamptz, timestamp and date value
// Postgres accepts, as columns and inside arrays, copied by the backfill
// and streamed (inserts and an update), reads back from `sluice read` equal
// to the source's to_jsonb (the oracle), and no table halts. With the build
// before, a timestamp past 294247-01-10 halted the table (bad_value) and
// sluice wait exited 2.
func TestTimestampRangeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.times (tenant_id text NOT NULL, id bigint NOT NULL, tz timestamptz, ts timestamp, d date,
		atz timestamptz[], ats timestamp[], ad date[], PRIMARY KEY (tenant_id, id))`)
	insert := func(base int) {
		for i, v := range timestampValues {
			src.exec(`INSERT INTO public.times VALUES ($1, $2, $3::text::timestamptz, $4::text::timestamp, $5::text::date,
				ARRAY[$3::text::timestamptz, NULL], ARRAY[$4::text::timestamp], ARRAY[$5::text::date, $5::text::date])`,
				[]string{"t1", "t2"}[i%2], base+i, v[0], v[1], v[2])
		}
	}
	insert(0) // copied by the backfill
	s, ctx := startLive(t, src, []string{"public.times"})
	insert(100) // streamed
	src.exec(`UPDATE public.times SET tz = '294276-06-01 00:00:00+00', ts = '294270-01-01 00:00:00.000001', d = '5874000-01-01' WHERE id = 103`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait: %v\n%s", err, s.tail())
	}
	if st, _ := s.cli("status"); strings.Contains(st, "halted table") {
		t.Fatalf("a table halted:\n%s", st)
	}
	n, diffs := oracle(t, src, s, "public.times", []string{"tenant_id", "id"})
	for _, d := range diffs {
		t.Error(d)
	}
	if want := 2 * len(timestampValues); n != want {
		t.Errorf("checked %d rows, want %d", n, want)
	}
}
