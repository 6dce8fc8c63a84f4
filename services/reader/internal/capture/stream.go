package capture

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/confirm"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// ColumnResolver gives the kind and Postgres type name of a relation's
// column (pgtypes.ResolveColumn, falling back to Resolve by type OID), and
// for a proto.KindToJSONB column the conversion of its text form to JSON.
type ColumnResolver func(ctx context.Context, relid uint32, col pgoutput.Column) (proto.Kind, string, batch.JSONFunc, error)

// FetchFunc reads the current text form of cols of table's row whose key
// columns equal keyVals (text forms, cast to keyTypes); found is false when
// the row is gone. It serves TOAST values a moved row left "unchanged". It
// must read from a snapshot that sees transaction xid (the change's, which
// has committed) as committed: a commit reaches the replication stream once
// its WAL is flushed, a moment before other sessions can see it (rule 6).
type FetchFunc func(ctx context.Context, table string, xid uint32, keyCols, keyTypes []string, keyVals [][]byte, cols []string) (vals [][]byte, found bool, err error)

// HaltFunc persists a halted table so that a restarted reader keeps it
// halted (the TRUNCATE that caused it lies before the confirmed LSN and is
// never replayed).
type HaltFunc func(ctx context.Context, table, reason string, at proto.LSN) error

// Options configure the data path.
type Options struct {
	Slot           string
	Publication    string
	Tables         map[string]source.Table // by schema.table
	BatchRows      int
	BatchBytes     int
	MaxPayload     int
	BatchInterval  time.Duration
	StatusInterval time.Duration
	AckWait        time.Duration
	MaxInFlight    int
	// MaxInline is the largest value a row carries inline (and the most
	// its inline values may add up to) when Claim is set: see pickClaims.
	MaxInline int
	Claim     ClaimFunc

	Mem     memory.Allocator
	Append  batch.AppendFunc
	Resolve ColumnResolver
	Halt    HaltFunc
	Fetch   FetchFunc
	// DescribeGenerated lists a relation's stored generated columns (on
	// each Relation message); nil: the table's as described at start.
	DescribeGenerated func(ctx context.Context, relid uint32) ([]source.Generated, error)
	Eval              EvalFunc
	Publish           PublishFunc
	Log               *slog.Logger
	Metrics           *Metrics
	Tracer            trace.Tracer
	State             *State

	// ScalarMaxForTest breaks the prefix-complete rule and UnchainedForTest
	// the publish ordering guard (tests' negative controls).
	ScalarMaxForTest bool
	UnchainedForTest bool
	// OnConfirm, when set, sees every confirmed LSN sent to Postgres.
	OnConfirm func(proto.LSN)
}

// tableState is one configured table within a session.
type tableState struct {
	info    source.Table
	schema  *batch.Schema
	b       *batch.Builder
	cb      *batch.Builder // the schema WithClaims: a change that carries values by reference
	halted  bool
	relCols []pgoutput.Column
	gen     genEval // stored generated columns the stream does not send (evaluated on the change), after relCols in the schema
}

// session is one replication connection's lifetime.
type session struct {
	o        *Options
	conn     *pgconn.PgConn
	tracker  *confirm.Tracker
	pipe     *Pipeline
	rels     map[uint32]*tableState // nil value: a relation not configured
	tables   map[string]*tableState
	row      batch.Row
	moveRow  batch.Row
	change   pgoutput.Change
	inTx     bool
	txLSN    uint64
	txTime   time.Time
	txXid    uint32 // the transaction's xid, from its Begin
	seq      uint64
	lastEnd  proto.LSN // end of the last commit received
	clean    proto.LSN // every change at or below it is handed to the pipeline
	idleEnd  proto.LSN // largest settled server WAL end seen outside a transaction
	idleObs  []idleObs // server WAL ends seen outside a transaction, not yet settled
	server   proto.LSN
	sent     proto.LSN // last confirmed LSN sent to Postgres
	lastTick proto.LSN
	tickAt   time.Time

	groupRows      int
	groupBytes     int
	groupStart     time.Time // wall clock of the group's first row
	groupFirstTime time.Time // commit time of the group's first transaction
	lastRecv       time.Time
	oldestPending  time.Time
}

// Stream runs one replication session on conn (a replication=database
// connection) from start until ctx ends or an error occurs. It returns the
// confirmed LSN reached, which the next session starts from.
func Stream(ctx context.Context, conn *pgconn.PgConn, start proto.LSN, o *Options) (proto.LSN, error) {
	s := &session{o: o, conn: conn, tracker: confirm.New(uint64(start)), rels: map[uint32]*tableState{},
		tables: map[string]*tableState{}, clean: start, lastEnd: start, sent: 0, lastRecv: time.Now()}
	s.tracker.SetScalarMaxForTest(o.ScalarMaxForTest)
	s.pipe = NewPipeline(o.Publish, s.tracker, o.MaxInFlight, o.AckWait, s.acked)
	s.pipe.noChain = o.UnchainedForTest
	for name, t := range o.Tables {
		ts := &tableState{info: t}
		if o.State.Halted(name) != "" {
			ts.halted = true
		}
		s.tables[name] = ts
	}
	defer func() {
		for _, t := range s.tables {
			t.release()
		}
	}()
	args := []string{"proto_version '1'", "publication_names '" + o.Publication + "'"}
	if err := pglogrepl.StartReplication(ctx, conn, o.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return start, fmt.Errorf("%w: starting replication of slot %s at %s: %w", ErrReplication, o.Slot, start, err)
	}
	o.State.SetPhase("streaming")
	o.Log.Info("streaming", "slot", o.Slot, "from", start.String())
	err := s.loop(ctx)
	s.pipe.Wait()
	if err == nil && ctx.Err() == nil {
		err = s.pipe.Err()
	}
	return proto.LSN(s.tracker.Confirmed()), err
}

func (s *session) acked(o Out, d time.Duration) {
	s.o.State.setConfirmed(proto.LSN(s.tracker.Confirmed()))
	m := s.o.Metrics
	m.PublishSeconds.Observe(d.Seconds())
	if o.Table == "" {
		m.Messages.WithLabelValues("tick").Inc()
		return
	}
	m.Messages.WithLabelValues("data").Inc()
	m.Rows.WithLabelValues(o.Table).Add(float64(o.Rows))
	m.Bytes.WithLabelValues(o.Table).Add(float64(len(o.Msg.Data)))
	m.BatchRows.Observe(float64(o.Rows))
	m.BatchBytes.Observe(float64(len(o.Msg.Data)))
	s.o.State.addRows(o.Table, o.Rows)
}

func (s *session) loop(ctx context.Context) error {
	nc := s.conn.Conn()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Now()) })
	defer stop()
	defer func() { _ = nc.SetReadDeadline(time.Time{}) }()
	nextStatus := time.Now()
	var deadline time.Time
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		if err := s.pipe.Err(); err != nil {
			return err
		}
		now := time.Now()
		if !now.Before(nextStatus) {
			if err := s.status(false); err != nil {
				return err
			}
			nextStatus = now.Add(s.o.StatusInterval)
			if err := s.idle(ctx, now); err != nil {
				return err
			}
		}
		wake := nextStatus
		if s.groupRows > 0 && !s.inTx {
			// Idle: close the group by the wall clock once the next
			// transaction, whenever it comes, will have a commit time past the
			// group's span, so that a replay (which closes at that
			// transaction's Begin) cuts the same batches. The wall-clock
			// fallback bounds latency if the source's clock runs ahead.
			due := s.groupFirstTime.Add(2 * s.o.BatchInterval)
			if fb := s.groupStart.Add(4 * s.o.BatchInterval); fb.Before(due) {
				due = fb
			}
			if q := s.lastRecv.Add(s.o.BatchInterval / 8); q.After(due) {
				due = q
			}
			if !now.Before(due) {
				if err := s.flushAll(ctx, s.lastEnd); err != nil {
					return err
				}
				continue
			}
			if due.Before(wake) {
				wake = due
			}
		}
		if !wake.Equal(deadline) {
			_ = nc.SetReadDeadline(wake)
			deadline = wake
		}
		if ctx.Err() != nil {
			return nil
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%w: receiving: %w", ErrReplication, err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("%w: parsing keepalive: %w", ErrReplication, err)
				}
				s.serverAt(proto.LSN(ka.ServerWALEnd))
				if !s.inTx {
					s.observeIdle(proto.LSN(ka.ServerWALEnd), time.Now())
				}
				if ka.ReplyRequested {
					if err := s.status(true); err != nil {
						return err
					}
				}
			case pglogrepl.XLogDataByteID:
				if len(m.Data) < 25 {
					return fmt.Errorf("%w: short XLogData (%d bytes)", ErrReplication, len(m.Data))
				}
				s.lastRecv = time.Now()
				s.serverAt(proto.LSN(binary.BigEndian.Uint64(m.Data[9:17])))
				if err := s.handle(ctx, m.Data[25:]); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("%w: %w", ErrReplication, pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return fmt.Errorf("%w: server ended the stream", ErrReplication)
		default:
		}
	}
}

func (s *session) serverAt(l proto.LSN) {
	if l > s.server {
		s.server = l
		s.o.Metrics.ServerLSN.Set(float64(l))
	}
}

// status sends the prefix-complete confirmed LSN in write, flush and apply.
func (s *session) status(reply bool) error {
	c := proto.LSN(s.tracker.Confirmed())
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(c), WALFlushPosition: pglogrepl.LSN(c), WALApplyPosition: pglogrepl.LSN(c),
	})
	if err != nil {
		return fmt.Errorf("%w: sending standby status: %w", ErrReplication, err)
	}
	_ = reply
	s.sent = c
	if s.o.OnConfirm != nil {
		s.o.OnConfirm(c)
	}
	m := s.o.Metrics
	m.ConfirmedLSN.Set(float64(c))
	if s.server > c {
		m.LagBytes.Set(float64(s.server - c))
	} else {
		m.LagBytes.Set(0)
	}
	if s.tracker.Pending() == 0 && s.groupRows == 0 {
		m.LagSeconds.Set(0)
	} else if !s.oldestPending.IsZero() {
		m.LagSeconds.Set(time.Since(s.oldestPending).Seconds())
	}
	s.o.State.setLSNs(c, s.server)
	return nil
}

type idleObs struct {
	at   time.Time
	wend proto.LSN
}

// settle is how long a keepalive's WAL end must stand before the reader
// confirms it. The server reports how far it has read; a commit record that
// straddles a WAL flush boundary can still be in decoding for a moment. It
// is flushed with the commit and decoded within milliseconds, so a position
// that stood this long with nothing received before it is complete.
func (s *session) settle() time.Duration { return max(2*s.o.StatusInterval, 500*time.Millisecond) }

func (s *session) observeIdle(w proto.LSN, now time.Time) {
	if n := len(s.idleObs); (n > 0 && w <= s.idleObs[n-1].wend) || w <= s.idleEnd {
		return
	}
	if len(s.idleObs) >= 64 {
		s.idleObs[len(s.idleObs)-1] = idleObs{now, w} // bounded: keep the newest
		return
	}
	s.idleObs = append(s.idleObs, idleObs{now, w})
}

func (s *session) settleIdle(now time.Time) {
	n := 0
	for n < len(s.idleObs) && now.Sub(s.idleObs[n].at) >= s.settle() {
		s.idleEnd = max(s.idleEnd, s.idleObs[n].wend)
		n++
	}
	s.idleObs = append(s.idleObs[:0], s.idleObs[n:]...)
}

// idle publishes a tick when nothing is buffered or pending, so the
// confirmed LSN (and the pipeline's frontier) reach the server's position.
func (s *session) idle(ctx context.Context, now time.Time) error {
	if s.inTx || s.groupRows > 0 || s.tracker.Pending() > 0 {
		return nil
	}
	s.oldestPending = time.Time{}
	s.settleIdle(now)
	at := max(s.clean, s.idleEnd)
	if at <= proto.LSN(s.tracker.Confirmed()) || at <= s.lastTick {
		return nil
	}
	s.lastTick, s.tickAt = at, now
	s.clean = at
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderThrough, at.String())
	id := proto.TickMsgID(at)
	h.Set(proto.HeaderMsgID, id)
	return s.send(ctx, Out{Msg: &nats.Msg{Subject: proto.SubjectTick, Header: h}, ID: id, Through: at})
}

// send waits for an in-flight slot (sending status updates while it waits)
// and publishes.
func (s *session) send(ctx context.Context, o Out) error {
	for {
		ok, err := s.pipe.Acquire(ctx, s.o.StatusInterval)
		if err != nil {
			if o.Span != nil {
				o.Span.End()
			}
			return err
		}
		if ok {
			break
		}
		s.o.Metrics.Blocked.Inc()
		if err := s.status(false); err != nil {
			return err
		}
	}
	if s.oldestPending.IsZero() {
		s.oldestPending = time.Now()
	}
	return s.pipe.Send(ctx, o)
}

func (s *session) handle(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pgoutput.TypeBegin:
		b, err := pgoutput.DecodeBegin(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		// A group spans at most batch_interval of commit time: the
		// transaction that crosses it starts a new group. The commit time
		// comes from the WAL, so a replay closes the group at the same place.
		if s.groupRows > 0 && b.CommitTime.Sub(s.groupFirstTime) >= s.o.BatchInterval {
			if err := s.flushAll(ctx, s.lastEnd); err != nil {
				return err
			}
		}
		s.inTx, s.txLSN, s.txTime, s.txXid, s.seq = true, b.FinalLSN, b.CommitTime, b.Xid, 0
		if s.groupRows == 0 {
			s.groupFirstTime = b.CommitTime
		}
	case pgoutput.TypeCommit:
		c, err := pgoutput.DecodeCommit(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		s.inTx = false
		s.lastEnd = proto.LSN(c.EndLSN)
		if s.groupRows == 0 {
			s.clean = s.lastEnd
			return nil
		}
		if s.groupRows >= s.o.BatchRows || s.groupBytes >= s.o.BatchBytes {
			return s.flushAll(ctx, s.lastEnd)
		}
	case pgoutput.TypeRelation:
		r, err := pgoutput.DecodeRelation(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		return s.relation(ctx, r)
	case pgoutput.TypeInsert, pgoutput.TypeUpdate, pgoutput.TypeDelete:
		if err := pgoutput.DecodeChange(data, &s.change); err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		s.seq++
		t := s.rels[s.change.Relation]
		if t == nil || t.halted {
			return nil
		}
		return s.apply(ctx, t)
	case pgoutput.TypeTruncate:
		tr, err := pgoutput.DecodeTruncate(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		for _, id := range tr.Relations {
			if t := s.rels[id]; t != nil && !t.halted {
				// Changes committed before the TRUNCATE are still published.
				if err := s.cut(ctx, t, s.clean); err != nil {
					return err
				}
				if err := s.halt(ctx, t, "truncate", ErrTruncate); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *session) relation(ctx context.Context, r pgoutput.Relation) error {
	name := r.Namespace + "." + r.Name
	t := s.tables[name]
	s.rels[r.ID] = t
	if t == nil {
		// A captured table under another name: renamed while sluice runs.
		for _, old := range s.tables {
			if old.info.OID == r.ID && !old.halted {
				if err := s.cut(ctx, old, s.clean); err != nil {
					return err
				}
				return s.halt(ctx, old, "renamed", fmt.Errorf("%w: %s was renamed to %s; put the new name in source.tables and resync it", ErrTableReplaced, old.info.Name, name))
			}
		}
		return nil
	}
	if t.halted {
		return nil
	}
	if t.info.OID != 0 && r.ID != t.info.OID {
		// Same name, another relation: dropped and created again (a DROP
		// is not replicated, so the old rows would stay).
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		return s.halt(ctx, t, "recreated", fmt.Errorf("%w: %s is another table than the one captured (relation %d, was %d): it was dropped and created again; resync it", ErrTableReplaced, name, r.ID, t.info.OID))
	}
	// What a DELETE, and the old image of a move, carries is the replica
	// identity: the routing column must be in it (checked at start; an ALTER
	// TABLE ... REPLICA IDENTITY while sluice runs shows up here).
	if r.Identity != 'f' && !slices.ContainsFunc(r.Columns, func(c pgoutput.Column) bool { return c.Key && c.Name == t.info.Routing }) {
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		return s.halt(ctx, t, "replica_identity", fmt.Errorf("%w: %s has REPLICA IDENTITY %q without %s; run ALTER TABLE %s REPLICA IDENTITY FULL; and resync it",
			ErrIdentityChanged, name, string(r.Identity), t.info.Routing, name))
	}
	if t.schema != nil && slices.Equal(t.relCols, r.Columns) {
		return nil
	}
	gens := t.info.Generated
	if s.o.DescribeGenerated != nil {
		var err error
		if gens, err = s.o.DescribeGenerated(ctx, r.ID); err != nil {
			return fmt.Errorf("describing generated columns of %s: %w", name, err)
		}
	}
	all := r.Columns
	var gen []source.Generated
	for _, g := range gens {
		if !slices.ContainsFunc(r.Columns, func(c pgoutput.Column) bool { return c.Name == g.Name }) {
			all = append(slices.Clip(all), pgoutput.Column{Name: g.Name, TypeOID: g.TypeOID, TypMod: g.TypMod})
			gen = append(gen, g)
		}
	}
	cols := make([]batch.Column, len(all))
	for i, c := range all {
		kind, pgType, toJSON, err := s.o.Resolve(ctx, r.ID, c)
		if err != nil {
			return fmt.Errorf("resolving type of %s.%s: %w", name, c.Name, err)
		}
		cols[i] = batch.Column{Name: c.Name, Kind: kind, PgType: pgType, TypeOID: c.TypeOID, TypMod: c.TypMod, ToJSON: toJSON}
		if proto.IsSystemColumn(c.Name) {
			return s.halt(ctx, t, "reserved_column", fmt.Errorf("column %s: names starting with %s are reserved", c.Name, proto.SystemPrefix))
		}
	}
	if t.schema != nil {
		for _, c := range cols {
			for _, old := range t.schema.Columns {
				if old.Name == c.Name && old.Kind != c.Kind {
					if err := s.cut(ctx, t, s.clean); err != nil {
						return err
					}
					return s.halt(ctx, t, "type_changed", fmt.Errorf("%w: %s.%s was %s (%s), is now %s (%s)", ErrTypeChanged, name, c.Name, old.PgType, old.Kind, c.PgType, c.Kind))
				}
			}
		}
		// New or dropped columns: the batch so far keeps its schema.
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		if t.halted {
			return nil
		}
		t.release()
	}
	sc, err := batch.NewSchema(name, cols, t.info.Key, t.info.Routing)
	if err != nil {
		return s.halt(ctx, t, "schema", err)
	}
	if t.schema != nil {
		s.o.Log.Info("table schema changed", "table", name, "fingerprint", sc.Fingerprint)
	}
	ge, err := newGenEval(sc, gen)
	if err != nil {
		return s.halt(ctx, t, "generated", err)
	}
	if err := ge.checkComputable(r.Identity == 'f'); err != nil {
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		return s.halt(ctx, t, "generated", fmt.Errorf("%w; run ALTER TABLE %s REPLICA IDENTITY FULL; and resync it", err, name))
	}
	t.schema, t.relCols, t.gen = sc, slices.Clone(r.Columns), ge
	t.b = batch.NewBuilder(s.o.Mem, sc, s.o.Append)
	return nil
}

// halt stops publishing a table's changes: persisted, counted, shown.
func (s *session) halt(ctx context.Context, t *tableState, reason string, cause error) error {
	name := t.info.Name
	s.o.Log.Error("table halted: its changes are no longer published; resync it", "table", name, "reason", reason, "error", cause)
	// The first change not carried: the halting one, or the oldest of the
	// table's batch, which is dropped with it.
	at := proto.LSN(s.txLSN)
	if t.b != nil && t.b.Rows() > 0 {
		at = min(at, t.b.First().LSN)
	}
	if err := s.o.Halt(ctx, name, cause.Error(), at); err != nil {
		return fmt.Errorf("recording halt of %s: %w", name, err)
	}
	t.halted = true
	if t.b != nil {
		s.groupRows -= t.b.Rows()
		s.groupBytes -= t.b.Bytes()
	}
	t.release()
	s.o.Metrics.Halted.WithLabelValues(name, reason).Set(1)
	s.o.State.SetHaltedAt(name, at)
	s.o.State.SetHalted(name, cause.Error())
	return nil
}

func (s *session) add(ctx context.Context, t *tableState, r *batch.Row) error {
	before := t.b.Bytes()
	if err := t.b.Append(r); err != nil {
		return s.halt(ctx, t, "bad_value", err)
	}
	if s.groupRows == 0 {
		s.groupStart = time.Now()
	}
	s.groupRows++
	s.groupBytes += t.b.Bytes() - before
	if t.b.Rows() >= s.o.BatchRows || t.b.Bytes() >= s.o.BatchBytes {
		// A cut inside a group depends only on rows and bytes.
		return s.cut(ctx, t, s.clean)
	}
	return nil
}

// flushAll closes the group: every table's batch is published (in table
// name order); the last one carries through, the others the previous clean
// position.
func (s *session) flushAll(ctx context.Context, through proto.LSN) error {
	names := make([]string, 0, len(s.tables))
	for n, t := range s.tables {
		if t.b != nil && t.b.Rows() > 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for i, n := range names {
		th := s.clean
		if i == len(names)-1 {
			th = through
		}
		if err := s.cut(ctx, s.tables[n], th); err != nil {
			return err
		}
	}
	s.clean = through
	s.groupRows, s.groupBytes = 0, 0
	return nil
}

// cut publishes a table's current batch with the given Sluice-Through.
func (s *session) cut(ctx context.Context, t *tableState, through proto.LSN) error {
	if t.b == nil || t.b.Rows() == 0 {
		return nil
	}
	rows, bytes := t.b.Rows(), t.b.Bytes()
	rec := t.b.Cut()
	defer rec.Release()
	s.groupRows -= rows
	s.groupBytes -= bytes
	return s.publish(ctx, t, t.schema.Fingerprint, rec, through)
}

// release frees the table's builders.
func (t *tableState) release() {
	for _, b := range []**batch.Builder{&t.b, &t.cb} {
		if *b != nil {
			(*b).Release()
			*b = nil
		}
	}
}
