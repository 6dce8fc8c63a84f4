package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher"
)

// The sampler's defaults: a sample every SeriesInterval, kept for
// SeriesWindow (a bounded ring of SeriesWindow/SeriesInterval samples).
const (
	SeriesInterval = 2 * time.Second
	SeriesWindow   = 15 * time.Minute
)

// Sample is one point of GET /api/v1/series. A field is null when this
// process runs no component that knows it (no reader: no rows in).
type Sample struct {
	Time time.Time `json:"t"`
	// RowsIn is rows/s the reader captured (backfill and stream); RowsOut
	// rows/s the indexer made readable; PacksPerSec packs/s it indexed.
	RowsIn      *float64 `json:"rows_in_per_sec"`
	RowsOut     *float64 `json:"rows_out_per_sec"`
	PacksPerSec *float64 `json:"packs_per_sec"`
	// VisibleLag is how long ago the source was first past what the
	// latest snapshot covers (0 when it covers the source's position): the
	// commit-to-visible lag, to one sample's resolution.
	VisibleLag *float64 `json:"visible_lag_sec"`
	// ThroughLag is the source's WAL position minus the latest snapshot's
	// through_lsn, in bytes.
	ThroughLag *float64 `json:"through_lag_bytes"`
	// Buffered is the flushers' buffered bytes.
	Buffered *float64 `json:"buffered_bytes"`
}

// Progress is one running (or finished) copy: a table's backfill now, a
// resync later (Kind says which).
type Progress struct {
	Kind       string  `json:"kind"` // backfill | resync
	Table      string  `json:"table"`
	Rows       int64   `json:"rows"`
	Estimated  int64   `json:"estimated_rows"` // pg_class.reltuples at the start; <= 0 unknown
	RowsPerSec float64 `json:"rows_per_sec"`
	ETASeconds float64 `json:"eta_sec"`
	Done       bool    `json:"done"`
	ID         int64   `json:"id,omitempty"`     // a resync's id
	Chunks     int64   `json:"chunks,omitempty"` // a resync's chunks published
}

// SeriesPage is the body of GET /api/v1/series.
type SeriesPage struct {
	IntervalSeconds float64    `json:"interval_sec"`
	WindowSeconds   float64    `json:"window_sec"`
	Samples         []Sample   `json:"samples"` // oldest first
	Progress        []Progress `json:"progress"`
}

// Series samples the status sources of this process every interval into
// a bounded ring, so the UI can chart the last window without Prometheus.
type Series struct {
	statuses map[string]func() any
	interval time.Duration
	// keepHalts reads the halts of dead-lettered packs, which records
	// them in the halt ledger (halts.go), every keepHaltsEvery while Run
	// runs: so a dead letter is recorded long before the DLQ's max age
	// even when no one asks for the status. nil: no ledger.
	keepHalts func(context.Context)

	mu      sync.Mutex // guards everything below
	ring    []Sample
	next    int // where the next sample goes once the ring is full
	prev    counters
	hasPrev bool
	// marks are (time, source WAL position) of past samples, oldest
	// first, for the visible lag: bounded like the ring.
	marks []mark
}

type counters struct {
	at                    time.Time
	rowsIn, rowsOut, pack int64
	hasIn, hasOut         bool
}

type mark struct {
	at  time.Time
	lsn proto.LSN
}

// NewSeries returns a sampler over statuses, one sample every interval
// (SeriesInterval when 0); Run samples until ctx ends.
func NewSeries(statuses map[string]func() any, interval time.Duration) *Series {
	if interval <= 0 {
		interval = SeriesInterval
	}
	n := int(SeriesWindow / interval)
	return &Series{statuses: statuses, interval: interval, ring: make([]Sample, 0, n)}
}

// Run samples every interval until ctx ends.
func (s *Series) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	keep := time.NewTicker(keepHaltsEvery)
	defer keep.Stop()
	s.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sample(now)
		case <-keep.C:
			if s.keepHalts != nil {
				s.keepHalts(ctx)
			}
		}
	}
}

// keepHaltsEvery: how often Run records the halts (see keepHalts).
const keepHaltsEvery = time.Minute

// sources is what one sample reads from the status sources.
type sources struct {
	rowsIn, rowsOut, packs int64
	hasIn, hasOut          bool
	serverLSN, through     proto.LSN
	hasServer, hasThrough  bool
	buffered               int64
	hasBuffered            bool
}

func (s *Series) read() sources {
	var src sources
	for name, f := range s.statuses {
		switch {
		case name == "reader":
			var r struct {
				ServerLSN string           `json:"server_lsn"`
				Rows      map[string]int64 `json:"rows"`
			}
			if decodeStatus(f(), &r) {
				src.hasIn = true
				for _, n := range r.Rows {
					src.rowsIn += n
				}
				if l, err := proto.ParseLSN(r.ServerLSN); err == nil && l > 0 {
					src.serverLSN, src.hasServer = l, true
				}
			}
		case name == "indexer":
			var r struct {
				Packs int64 `json:"packs_indexed"`
				Rows  int64 `json:"rows_indexed"`
			}
			if decodeStatus(f(), &r) {
				src.hasOut = true
				src.rowsOut, src.packs = r.Rows, r.Packs
			}
		case name == "publisher":
			var r struct {
				Through string `json:"through_lsn"`
			}
			if decodeStatus(f(), &r) {
				if l, err := proto.ParseLSN(r.Through); err == nil && l > 0 {
					src.through, src.hasThrough = l, true
				}
			}
		case name == "flusher" || strings.HasPrefix(name, "flusher-"):
			if n, ok := flusherBuffered(f()); ok {
				src.buffered += n
				src.hasBuffered = true
			}
		}
	}
	return src
}

func (s *Series) sample(now time.Time) {
	src := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	smp := Sample{Time: now.UTC().Truncate(time.Millisecond)}
	cur := counters{at: now, rowsIn: src.rowsIn, rowsOut: src.rowsOut, pack: src.packs, hasIn: src.hasIn, hasOut: src.hasOut}
	if s.hasPrev {
		if dt := now.Sub(s.prev.at).Seconds(); dt > 0 {
			if cur.hasIn && s.prev.hasIn {
				smp.RowsIn = rate(cur.rowsIn, s.prev.rowsIn, dt)
			}
			if cur.hasOut && s.prev.hasOut {
				smp.RowsOut = rate(cur.rowsOut, s.prev.rowsOut, dt)
				smp.PacksPerSec = rate(cur.pack, s.prev.pack, dt)
			}
		}
	}
	s.prev, s.hasPrev = cur, true
	if src.hasBuffered {
		smp.Buffered = ptr(float64(src.buffered))
	}
	if src.hasServer {
		if len(s.marks) == cap(s.ring) {
			s.marks = s.marks[1:]
		}
		s.marks = append(s.marks, mark{now, src.serverLSN})
	}
	if src.hasServer && src.hasThrough {
		lag := 0.0
		if src.serverLSN > src.through {
			lag = float64(src.serverLSN - src.through)
		}
		smp.ThroughLag = ptr(lag)
		// The oldest moment the source was past through: every change
		// since then is not visible yet.
		vis := 0.0
		if i := sort.Search(len(s.marks), func(i int) bool { return s.marks[i].lsn > src.through }); i < len(s.marks) {
			vis = now.Sub(s.marks[i].at).Seconds()
		}
		smp.VisibleLag = ptr(vis)
	}
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, smp)
		return
	}
	s.ring[s.next] = smp
	s.next = (s.next + 1) % len(s.ring)
}

// rate is the per-second rate of a counter; a counter that went back (a
// restarted component) counts from zero.
func rate(cur, prev int64, dt float64) *float64 {
	d := cur - prev
	if d < 0 {
		d = cur
	}
	return ptr(float64(d) / dt)
}

func ptr(f float64) *float64 { return &f }

// Samples returns the ring, oldest first.
func (s *Series) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.ring))
	out = append(out, s.ring[s.next:]...)
	return append(out, s.ring[:s.next]...)
}

// progress reads the running copies from the reader's status.
func (s *Series) progress() []Progress {
	out := []Progress{}
	f, ok := s.statuses["reader"]
	if !ok {
		return out
	}
	var r struct {
		Backfill map[string]struct {
			Rows       int64         `json:"rows"`
			Estimated  int64         `json:"estimated_rows"`
			RowsPerSec float64       `json:"rows_per_sec"`
			ETA        time.Duration `json:"eta_ns"`
			Done       bool          `json:"done"`
		} `json:"backfill"`
		Resyncs map[string]struct {
			ID         int64         `json:"id"`
			Rows       int64         `json:"rows"`
			Estimated  int64         `json:"estimated_rows"`
			RowsPerSec float64       `json:"rows_per_sec"`
			ETA        time.Duration `json:"eta_ns"`
			Done       bool          `json:"done"`
			Chunks     int64         `json:"chunks"`
		} `json:"resyncs"`
	}
	if !decodeStatus(f(), &r) {
		return out
	}
	for table, p := range r.Backfill {
		out = append(out, Progress{Kind: "backfill", Table: table, Rows: p.Rows, Estimated: p.Estimated,
			RowsPerSec: p.RowsPerSec, ETASeconds: p.ETA.Seconds(), Done: p.Done})
	}
	for table, p := range r.Resyncs {
		out = append(out, Progress{Kind: "resync", Table: table, Rows: p.Rows, Estimated: p.Estimated,
			RowsPerSec: p.RowsPerSec, ETASeconds: p.ETA.Seconds(), Done: p.Done, ID: p.ID, Chunks: p.Chunks})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Table != out[j].Table {
			return out[i].Table < out[j].Table
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}

func (s *Series) serve(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, SeriesPage{
		IntervalSeconds: s.interval.Seconds(), WindowSeconds: SeriesWindow.Seconds(),
		Samples: s.Samples(), Progress: s.progress(),
	})
}

// decodeStatus reads a status value through its JSON form into v.
func decodeStatus(st any, v any) bool {
	if st == nil {
		return false
	}
	b, err := json.Marshal(st)
	if err != nil {
		return false
	}
	return json.Unmarshal(b, v) == nil
}

// flusherBuffered reads a flusher status's buffered bytes: the flusher's
// own type directly (its JSON form carries every destination), anything
// else through its JSON form.
func flusherBuffered(v any) (int64, bool) {
	switch s := v.(type) {
	case flusher.Status:
		return s.BufferedBytes, true
	case *flusher.Status:
		if s == nil {
			return 0, false
		}
		return s.BufferedBytes, true
	}
	var s struct {
		BufferedBytes int64 `json:"buffered_bytes"`
	}
	return s.BufferedBytes, decodeStatus(v, &s)
}
