package state

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestListKnownDestinations: List names every destination with a cursor
// or a lifecycle row, once, in name order, active when it has no row;
// --state filters (active: cursors without a non-active row, and rows set
// back to active); keyset pages of every size cover the same list without
// a gap or a repeat.
func TestListKnownDestinations(t *testing.T) {
	pool, _, _ := migrated(t)
	ctx := context.Background()
	ds := NewDestinationStates(pool, schema)
	// 250 flushed destinations d000..d249 (cursors), some with states, and
	// two that only have a state (paused ahead of their first row).
	if _, err := pool.Exec(ctx, `INSERT INTO sluice.cursors (destination, partition, lsn, seq, term, updated_at)
		SELECT format('d%s', lpad(g::text, 3, '0')), g % 4, 1000 + g, g, 1, now() FROM generate_series(0, 249) g`); err != nil {
		t.Fatal(err)
	}
	want := map[string]DestinationState{}
	for i := range 250 {
		want[fmt.Sprintf("d%03d", i)] = Active
	}
	set := func(d string, s ...DestinationState) {
		for _, st := range s {
			if _, err := ds.Set(ctx, d, st, "test"); err != nil {
				t.Fatal(err)
			}
		}
		want[d] = s[len(s)-1]
	}
	set("d007", Paused)
	set("d100", Retired)
	set("d101", Draining, Drained)
	set("d102", Paused, Active) // a row that says active
	set("a-early", Paused)
	set("zz-late", Retired)

	collect := func(o ListOptions) []KnownDestination {
		t.Helper()
		var all []KnownDestination
		for pages := 0; ; pages++ {
			page, more, err := ds.List(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if pages > 1000 {
				t.Fatal("paging never ends")
			}
			all = append(all, page...)
			if !more {
				return all
			}
			if len(page) == 0 {
				t.Fatal("an empty page says more follow")
			}
			o.After = page[len(page)-1].Destination
		}
	}
	for _, limit := range []int{1, 7, 100, 251, 0} {
		for _, only := range []DestinationState{"", Active, Paused, Retired, Drained, Draining} {
			got := collect(ListOptions{State: only, Limit: limit})
			var names, wantNames []string
			for _, d := range got {
				names = append(names, d.Destination)
				if d.State != want[d.Destination] {
					t.Errorf("limit %d state %q: %s is %s, want %s", limit, only, d.Destination, d.State, want[d.Destination])
				}
			}
			for d, s := range want {
				if only == "" || s == only {
					wantNames = append(wantNames, d)
				}
			}
			slices.Sort(wantNames)
			if !slices.Equal(names, wantNames) {
				t.Fatalf("limit %d state %q: listed %d %v…, want %d %v…", limit, only, len(names), head(names), len(wantNames), head(wantNames))
			}
		}
	}
	// The details: a cursor's partition and position; a row's reason.
	page, _, err := ds.List(ctx, ListOptions{After: "d006", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := page[0]
	if d.Destination != "d007" || d.State != Paused || d.Reason != "test" || d.Partition == nil || *d.Partition != 3 ||
		d.Cursor != "0/3EF:7" || d.FlushedAt == nil || time.Since(*d.FlushedAt) > time.Hour || d.ChangedAt == nil {
		t.Fatalf("d007 = %+v", d)
	}
	for name, n := range map[string]int{"d102": 1, "a-early": 1, "nobody": 0} {
		if page, more, err := ds.List(ctx, ListOptions{Name: name}); err != nil || len(page) != n || more || (n == 1 && page[0].Destination != name) {
			t.Errorf("List(Name %s) = %+v, %v, %v; want %d row", name, page, more, err, n)
		}
	}
	if _, _, err := ds.List(ctx, ListOptions{State: "bogus"}); err == nil {
		t.Fatal("an unknown state was accepted")
	}
}

func head(xs []string) []string { return xs[:min(len(xs), 5)] }

// TestListHundredThousand: 100,000 flushed destinations and 1,000 with a
// lifecycle row page out completely, each once, in name order, in pages
// of 5,000 (what `sluice destinations list` asks for).
func TestListHundredThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 rows")
	}
	pool, _, _ := migrated(t)
	ctx := context.Background()
	ds := NewDestinationStates(pool, schema)
	if _, err := pool.Exec(ctx, `INSERT INTO sluice.cursors (destination, partition, lsn, seq, term, updated_at)
		SELECT format('t%s', lpad(g::text, 6, '0')), g % 16, g, 0, 1, now() FROM generate_series(1, 100000) g`); err != nil {
		t.Fatal(err)
	}
	// Every 100th is paused; 1,000 more are retired ahead of their first row.
	if _, err := pool.Exec(ctx, `INSERT INTO sluice.destination_states (destination, state, version)
		SELECT format('t%s', lpad((g * 100)::text, 6, '0')), 'paused', g FROM generate_series(1, 1000) g
		UNION ALL
		SELECT format('u%s', lpad(g::text, 6, '0')), 'retired', 1000 + g FROM generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE sluice.cursors; ANALYZE sluice.destination_states`); err != nil {
		t.Fatal(err)
	}
	count := func(only DestinationState) (n int, states map[DestinationState]int) {
		states = map[DestinationState]int{}
		o := ListOptions{State: only, Limit: 5000}
		last := ""
		for {
			page, more, err := ds.List(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range page {
				if d.Destination <= last {
					t.Fatalf("%s after %s", d.Destination, last)
				}
				last = d.Destination
				states[d.State]++
			}
			n += len(page)
			if !more {
				return n, states
			}
			o.After = last
		}
	}
	if n, st := count(""); n != 101000 || st[Active] != 99000 || st[Paused] != 1000 || st[Retired] != 1000 {
		t.Fatalf("listed %d: %v; want 101,000: 99,000 active, 1,000 paused, 1,000 retired", n, st)
	}
	if n, _ := count(Active); n != 99000 {
		t.Fatalf("--state active listed %d, want 99,000", n)
	}
	if n, _ := count(Paused); n != 1000 {
		t.Fatalf("--state paused listed %d, want 1,000", n)
	}
}
