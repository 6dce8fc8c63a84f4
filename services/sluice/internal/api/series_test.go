package api

import (
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/services/flusher"
)

// TestSeriesSamples drives the sampler over status sources whose values
// the test sets (the sampler only reads status functions; the components
// behind them run in the Chromium test), at chosen instants: rates are
// counter deltas over the elapsed time, a counter that went back counts
// from zero, the through lag is the source position minus the snapshot's
// through_lsn, the visible lag is the time since the source first passed
// what the snapshot covers, and the ring keeps the last window, oldest
// first.
func TestSeriesSamples(t *testing.T) {
	type reader struct {
		ServerLSN string           `json:"server_lsn"`
		Rows      map[string]int64 `json:"rows"`
	}
	type indexer struct {
		Packs int64 `json:"packs_indexed"`
		Rows  int64 `json:"rows_indexed"`
	}
	type publisher struct {
		Through string `json:"through_lsn"`
	}
	var (
		rd  = reader{ServerLSN: "0/1000", Rows: map[string]int64{"public.a": 0}}
		ix  indexer
		pub = publisher{Through: "0/1000"}
		buf int64
	)
	s := NewSeries(map[string]func() any{
		"reader":    func() any { return rd },
		"indexer":   func() any { return ix },
		"publisher": func() any { return pub },
		"flusher":   func() any { return flusher.Status{BufferedBytes: buf} },
	}, time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.sample(t0)
	rd.Rows["public.a"], rd.Rows["public.b"] = 100, 100 // 200 rows in 2 s
	rd.ServerLSN = "0/3000"
	ix.Rows, ix.Packs = 50, 4
	buf = 4096
	s.sample(t0.Add(2 * time.Second))
	pub.Through = "0/2000"                     // covers 0/1000, not yet 0/3000 (first seen at t0+2s)
	rd.Rows = map[string]int64{"public.a": 10} // a restarted reader counts from zero
	s.sample(t0.Add(6 * time.Second))

	got := s.Samples()
	if len(got) != 3 {
		t.Fatalf("%d samples, want 3", len(got))
	}
	if got[0].RowsIn != nil || got[0].VisibleLag == nil || *got[0].VisibleLag != 0 || *got[0].ThroughLag != 0 {
		t.Fatalf("first sample %+v: no rate yet, no lag", got[0])
	}
	g := got[1]
	if *g.RowsIn != 100 || *g.RowsOut != 25 || *g.PacksPerSec != 2 || *g.Buffered != 4096 || *g.ThroughLag != 0x2000 || *g.VisibleLag != 0 {
		t.Fatalf("second sample: in %v out %v packs %v buffered %v through lag %v visible %v", *g.RowsIn, *g.RowsOut, *g.PacksPerSec, *g.Buffered, *g.ThroughLag, *g.VisibleLag)
	}
	g = got[2]
	if *g.RowsIn != 2.5 || *g.ThroughLag != 0x1000 || *g.VisibleLag != 4 {
		t.Fatalf("third sample: in %v through lag %v visible %v, want 2.5, 4096, 4", *g.RowsIn, *g.ThroughLag, *g.VisibleLag)
	}

	// The ring is bounded by the window and stays oldest first.
	n := int(SeriesWindow / time.Second)
	for i := range n + 5 {
		s.sample(t0.Add(time.Duration(10+i) * time.Second))
	}
	got = s.Samples()
	if len(got) != n {
		t.Fatalf("%d samples kept, want %d", len(got), n)
	}
	for i := 1; i < len(got); i++ {
		if !got[i].Time.After(got[i-1].Time) {
			t.Fatalf("samples out of order at %d: %v after %v", i, got[i].Time, got[i-1].Time)
		}
	}
	if want := t0.Add(time.Duration(10+n+4) * time.Second); !got[n-1].Time.Equal(want) {
		t.Fatalf("newest sample at %v, want %v", got[n-1].Time, want)
	}
	if len(s.marks) > n {
		t.Fatalf("%d lag marks kept, more than the ring's %d", len(s.marks), n)
	}
}
