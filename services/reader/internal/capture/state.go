package capture

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
)

// Progress is one table's backfill progress.
type Progress struct {
	Rows       int64         `json:"rows"`
	Estimated  int64         `json:"estimated_rows"`
	RowsPerSec float64       `json:"rows_per_sec"`
	ETA        time.Duration `json:"eta_ns"`
	Done       bool          `json:"done"`
}

// State is what the data path shows to Status. Safe for concurrent use.
type State struct {
	mu        sync.Mutex
	phase     string
	confirmed proto.LSN
	server    proto.LSN
	rows      map[string]int64
	halted    map[string]string
	haltedAt  map[string]proto.LSN
	backfill  map[string]Progress
	resyncs   map[string]ResyncProgress
	recovered map[string]Recovered
	columns   map[string][]pgoutput.Column // LastColumns
	nums      map[string]ColumnNums        // LastColumnNums
	parts     map[string][]uint32          // LastPartitions
	lastErr   string
	spillB    int64 // streamed transactions' spill files
	spillN    int   // streamed transactions open
}

// Recovered is a halt a resync cleared: the changes from HaltedAt on that
// the halt dropped are in a snapshot only once it is through End (the
// resync's end mark), so `sluice wait` for an LSN at or above HaltedAt
// waits for End too.
type Recovered struct {
	HaltedAt proto.LSN
	End      proto.LSN
}

// ResyncProgress is a live resync's progress (of one table).
type ResyncProgress struct {
	ID int64 `json:"id"`
	Progress
	Chunks int64 `json:"chunks"`
}

// NewState returns an empty state.
func NewState() *State {
	return &State{phase: "starting", rows: map[string]int64{}, halted: map[string]string{}, haltedAt: map[string]proto.LSN{}, backfill: map[string]Progress{}, resyncs: map[string]ResyncProgress{}, recovered: map[string]Recovered{}, columns: map[string][]pgoutput.Column{}, nums: map[string]ColumnNums{}, parts: map[string][]uint32{}}
}

// SetColumns records the columns last described for table (LastColumns).
func (s *State) SetColumns(table string, cols []pgoutput.Column) {
	s.mu.Lock()
	s.columns[table] = slices.Clone(cols)
	s.mu.Unlock()
}

// SetColumnNums records the attnums last read for table's columns.
func (s *State) SetColumnNums(table string, nums ColumnNums) {
	s.mu.Lock()
	s.nums[table] = maps.Clone(nums)
	s.mu.Unlock()
}

// SetPartitions records the leaf partitions last read for table.
func (s *State) SetPartitions(table string, parts []uint32) {
	s.mu.Lock()
	s.parts[table] = append([]uint32{}, parts...)
	s.mu.Unlock()
}

// Partitions returns the leaf partitions last read for table, and whether
// any were.
func (s *State) Partitions(table string) ([]uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.parts[table]
	return slices.Clone(p), ok
}

// ColumnNums returns the attnums last read for table's columns, or nil.
func (s *State) ColumnNums(table string) ColumnNums {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.nums[table])
}

// Columns returns the columns last described for table, or nil.
func (s *State) Columns(table string) []pgoutput.Column {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.columns[table])
}

// StateSnapshot is a copy of the state.
type StateSnapshot struct {
	Phase         string
	Confirmed     proto.LSN
	Server        proto.LSN
	Rows          map[string]int64
	Halted        map[string]string
	HaltedAt      map[string]proto.LSN // a halted table's first change not carried, where known
	Backfill      map[string]Progress
	Resyncs       map[string]ResyncProgress
	Recovered     map[string]Recovered
	LastError     string
	SpillBytes    int64 // streamed transactions' spill files on local disk
	StreamingTxns int   // streamed transactions open
}

// Snapshot copies the state.
func (s *State) Snapshot() StateSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StateSnapshot{Phase: s.phase, Confirmed: s.confirmed, Server: s.server, Rows: maps.Clone(s.rows),
		Halted: maps.Clone(s.halted), HaltedAt: maps.Clone(s.haltedAt), Backfill: maps.Clone(s.backfill), Resyncs: maps.Clone(s.resyncs), Recovered: maps.Clone(s.recovered), LastError: s.lastErr,
		SpillBytes: s.spillB, StreamingTxns: s.spillN}
}

// SetPhase records the reader's phase (standby, backfilling, streaming, ...).
func (s *State) SetPhase(p string) { s.mu.Lock(); s.phase = p; s.mu.Unlock() }

// SetError records the last session error.
func (s *State) SetError(err error) {
	s.mu.Lock()
	s.lastErr = ""
	if err != nil {
		s.lastErr = err.Error()
	}
	s.mu.Unlock()
}

func (s *State) setLSNs(confirmed, server proto.LSN) {
	s.mu.Lock()
	s.confirmed = max(s.confirmed, confirmed)
	if server > s.server {
		s.server = server
	}
	s.mu.Unlock()
}

func (s *State) setConfirmed(c proto.LSN) {
	s.mu.Lock()
	s.confirmed = max(s.confirmed, c)
	s.mu.Unlock()
}

func (s *State) addRows(table string, n int) { s.mu.Lock(); s.rows[table] += int64(n); s.mu.Unlock() }

// SetHalted records a halted table.
func (s *State) SetHalted(table, reason string) { s.mu.Lock(); s.halted[table] = reason; s.mu.Unlock() }

// SetHaltedAt records the commit LSN of a halted table's first change that
// is not carried (every change of it at or after that position is in no
// snapshot); `sluice wait` compares it with the LSN it waits for.
func (s *State) SetHaltedAt(table string, at proto.LSN) {
	s.mu.Lock()
	s.haltedAt[table] = at
	s.mu.Unlock()
}

// ClearHalted records that table streams again: a resync that ends at end
// completed.
func (s *State) ClearHalted(table string, end proto.LSN) {
	s.mu.Lock()
	if at, ok := s.haltedAt[table]; ok {
		s.recovered[table] = Recovered{HaltedAt: at, End: end}
	}
	delete(s.halted, table)
	delete(s.haltedAt, table)
	s.mu.Unlock()
}

// SetRecovered records a halt a resync cleared before this reader started
// (persisted with the resync).
func (s *State) SetRecovered(table string, r Recovered) {
	s.mu.Lock()
	s.recovered[table] = r
	s.mu.Unlock()
}

// Halted returns the halt reason of table, or "".
func (s *State) Halted(table string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.halted[table]
}

// SetResync records a live resync's progress.
func (s *State) SetResync(table string, p ResyncProgress) {
	s.mu.Lock()
	s.resyncs[table] = p
	s.mu.Unlock()
}

func (s *State) setProgress(table string, p Progress) {
	s.mu.Lock()
	s.backfill[table] = p
	s.mu.Unlock()
}

func (s *State) setSpill(bytes int64, open int) {
	s.mu.Lock()
	s.spillB, s.spillN = bytes, open
	s.mu.Unlock()
}
