package cli

import (
	"bytes"
	"strings"
	"testing"
)

// sluice status renders the snapshot, halted tables, one line per
// destination (an encoded name with its routing value) and the streams.
func TestPrintStatus(t *testing.T) {
	raw := `{"services":{"reader":{"state":"streaming","halted_tables":{"public.m":"TRUNCATE is not replicated"},
		"backfill":{"public.b":{"rows":3000,"estimated_rows":3000,"done":true},"public.n":{"rows":1198,"estimated_rows":-1,"done":true}},
		"resyncs":{"public.r":{"id":2,"rows":1200,"estimated_rows":4000,"rows_per_sec":600,"eta_ns":4000000000,"chunks":3}}},
		"flusher":{"id":"f1","destinations":[{"destination":"~c4n64","partition":7,"state":"healthy","buffered_rows":3,"cursor":"0/10:1","age_seconds":1.5}]}},
		"snapshot":{"version":4,"published_at":"2026-11-30T10:00:00Z","through_lsn":"0/20","packs":9},
		"streams":[{"name":"DLQ","messages":2,"bytes":10,"consumers":[{"name":"c","pending":1,"ack_pending":0,"redelivered":0}]}]}`
	var out bytes.Buffer
	if err := printStatus(&out, []byte(raw)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"snapshot 4", "through_lsn 0/20", "packs 9",
		"halted table public.m", "TRUNCATE is not replicated", "sluice resync --table public.m",
		"backfill public.b", "done, 3000 of ~3000 rows",
		// A never-analyzed table's reltuples is -1: its size is unknown.
		"backfill public.n", "done, 1198 rows (size unknown)",
		"resync public.r", "running, 1200 of ~4000 rows, 3 chunks, 600 rows/s, eta 4s",
		"~c4n64 (a.b)", "healthy", "0/10:1", "1.5s",
		"DLQ", `flusher: {"id":"f1"}`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestStatusUnknownEstimate(t *testing.T) {
	raw := `{"services":{"reader":{"state":"streaming","backfill":{"public.n":{"rows":1198,"estimated_rows":-1,"done":true}}}}}`
	var out bytes.Buffer
	if err := printStatus(&out, []byte(raw)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "~-1") {
		t.Errorf("status prints an unknown size as ~-1:\n%s", out.String())
	}
}

// sluice status says whether the reader's slot can follow a promoted
// standby, why not, and the last slot_lost with its reason.
func TestPrintStatusFailover(t *testing.T) {
	raw := `{"services":{"reader":{"state":"streaming",
		"failover":{"possible":false,"why":["the slot has failover off"],"slot_failover":false},
		"slot_lost":{"at":"2026-12-07T12:00:00Z","why":"replication slot s was gone after its backfill finished"}}}}`
	var out bytes.Buffer
	if err := printStatus(&out, []byte(raw)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"failover", "not possible", "the slot has failover off", "slot lost at 2026-12-07T12:00:00Z", "was gone after its backfill finished"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, out.String())
		}
	}
}

// sluice status says that the reader decodes from a standby, the primary
// it writes to (host only) and the standby's replay lag.
func TestPrintStatusStandby(t *testing.T) {
	raw := `{"services":{"reader":{"state":"streaming",
		"standby":{"primary":"pg-a:5432","replay_lsn":"0/3000148","lag_bytes":2048,"lag_seconds":0.25,"checked_at":"2026-12-07T12:00:00Z"}}}}`
	var out bytes.Buffer
	if err := printStatus(&out, []byte(raw)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"decoding from a standby", "writes to the primary pg-a:5432", "replayed 0/3000148", "2.0KiB behind it", "250ms ago"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, out.String())
		}
	}
}
