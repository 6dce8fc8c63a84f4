package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/confirm"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/natsotel"
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

	Mem     memory.Allocator
	Append  batch.AppendFunc
	Resolve ColumnResolver
	Halt    HaltFunc
	Fetch   FetchFunc
	Publish PublishFunc
	Log     *slog.Logger
	Metrics *Metrics
	Tracer  trace.Tracer
	State   *State

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
	halted  bool
	relCols []pgoutput.Column
	gen     []string // stored generated columns the stream does not send (read from the source), after relCols in the schema
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
			if t.b != nil {
				t.b.Release()
			}
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
	all := r.Columns
	var gen []string
	for _, g := range t.info.Generated {
		if !slices.ContainsFunc(r.Columns, func(c pgoutput.Column) bool { return c.Name == g.Name }) {
			all = append(slices.Clip(all), pgoutput.Column{Name: g.Name, TypeOID: g.TypeOID, TypMod: g.TypMod})
			gen = append(gen, g.Name)
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
		t.b.Release()
		t.b = nil
	}
	sc, err := batch.NewSchema(name, cols, t.info.Key, t.info.Routing)
	if err != nil {
		return s.halt(ctx, t, "schema", err)
	}
	if t.schema != nil {
		s.o.Log.Info("table schema changed", "table", name, "fingerprint", sc.Fingerprint)
	}
	t.schema, t.relCols, t.gen = sc, slices.Clone(r.Columns), gen
	t.b = batch.NewBuilder(s.o.Mem, sc, s.o.Append)
	return nil
}

// halt stops publishing a table's changes: persisted, counted, shown.
func (s *session) halt(ctx context.Context, t *tableState, reason string, cause error) error {
	name := t.info.Name
	s.o.Log.Error("table halted: its changes are no longer published; resync it", "table", name, "reason", reason, "error", cause)
	if err := s.o.Halt(ctx, name, cause.Error(), proto.LSN(s.txLSN)); err != nil {
		return fmt.Errorf("recording halt of %s: %w", name, err)
	}
	t.halted = true
	if t.b != nil {
		s.groupRows -= t.b.Rows()
		s.groupBytes -= t.b.Bytes()
		t.b.Release()
		t.b = nil
	}
	s.o.Metrics.Halted.WithLabelValues(name, reason).Set(1)
	s.o.State.SetHalted(name, cause.Error())
	return nil
}

func (s *session) apply(ctx context.Context, t *tableState) error {
	sc := t.schema
	if sc == nil {
		return fmt.Errorf("%w: change for %s before its Relation message", ErrReplication, t.info.Name)
	}
	c := &s.change
	n := len(sc.Columns)
	nRel := len(t.relCols) // the columns the stream sends; then t.gen
	pos := proto.Position{LSN: proto.LSN(s.txLSN), Seq: s.seq}
	r := &s.row
	r.Pos, r.CommitTime, r.Unchanged = pos, s.txTime, r.Unchanged[:0]
	r.Kinds, r.Values = r.Kinds[:0], r.Values[:0]
	var src *pgoutput.Tuple
	switch c.Op {
	case pgoutput.TypeInsert:
		r.Op, src = proto.OpInsert, &c.New
	case pgoutput.TypeUpdate:
		r.Op, src = proto.OpUpdate, &c.New
	default:
		r.Op, src = proto.OpDelete, &c.Old
	}
	if src.Len() != nRel {
		return fmt.Errorf("%w: %s: tuple of %d columns, relation has %d", ErrReplication, t.info.Name, src.Len(), nRel)
	}
	full := c.OldKind == 'O'
	for i := 0; i < nRel; i++ {
		k, v := src.Kinds[i], src.Values[i]
		switch k {
		case pgoutput.ValueUnchanged:
			if full && c.Old.Kinds[i] == pgoutput.ValueText {
				k, v = batch.Text, c.Old.Values[i]
			} else {
				k, v = batch.Unchanged, nil
				r.Unchanged = append(r.Unchanged, sc.Columns[i].Name)
			}
		case pgoutput.ValueText:
		default:
			k, v = batch.Null, nil
		}
		r.Kinds = append(r.Kinds, k)
		r.Values = append(r.Values, v)
	}
	if err := s.fillGenerated(ctx, t, r, c); err != nil {
		return err
	}
	if c.Op == pgoutput.TypeUpdate && c.OldKind != 0 && s.moved(sc, c) {
		m := &s.moveRow
		m.Op, m.Pos, m.CommitTime, m.Unchanged = proto.OpMoveOut, pos, s.txTime, nil
		m.Kinds, m.Values = m.Kinds[:0], m.Values[:0]
		for i := 0; i < n; i++ {
			m.Kinds = append(m.Kinds, batch.Null)
			m.Values = append(m.Values, nil)
		}
		idx := append(slices.Clip(sc.KeyIdx), sc.RoutingIdx)
		for _, i := range idx {
			if c.Old.Kinds[i] == pgoutput.ValueText {
				m.Kinds[i], m.Values[i] = batch.Text, c.Old.Values[i]
			}
		}
		if err := s.add(ctx, t, m); err != nil {
			return err
		}
		if len(r.Unchanged) > 0 {
			// The row arrives in a destination (or under a key) that never
			// held the values it leaves unchanged: carrying them forward
			// there would find nothing (rule 6). Without the old tuple,
			// read them from the source. The row's current value can be
			// newer than this change; a later change then carries it too,
			// so the end state is exact.
			if err := s.fillUnchanged(ctx, t, r, c); err != nil {
				return err
			}
		}
	}
	return s.add(ctx, t, r)
}

// fillGenerated appends the values of the stored generated columns the
// stream does not send (pgoutput before Postgres 18): read from the source
// by the row's key for an insert or update (like a moved row's TOAST values:
// the value read can be newer, and a later change carries it too), NULL in a
// delete. One read per change of such a table.
func (s *session) fillGenerated(ctx context.Context, t *tableState, r *batch.Row, c *pgoutput.Change) error {
	if len(t.gen) == 0 {
		return nil
	}
	var vals [][]byte
	found := false
	if c.Op != pgoutput.TypeDelete && s.o.Fetch != nil {
		keyCols, keyTypes, keyVals, ok := s.newKey(t, c)
		if ok {
			var err error
			vals, found, err = s.o.Fetch(ctx, t.info.Name, s.txXid, keyCols, keyTypes, keyVals, t.gen)
			if err != nil {
				return fmt.Errorf("reading generated columns of a %s row: %w", t.info.Name, err)
			}
		}
	}
	for j := range t.gen {
		if found && vals[j] != nil {
			r.Kinds, r.Values = append(r.Kinds, batch.Text), append(r.Values, vals[j])
		} else {
			r.Kinds, r.Values = append(r.Kinds, batch.Null), append(r.Values, nil)
		}
	}
	return nil
}

// newKey is the key of the change's new row (names, types, text values);
// ok is false when a key value is not in the tuple.
func (s *session) newKey(t *tableState, c *pgoutput.Change) (cols, types []string, vals [][]byte, ok bool) {
	sc := t.schema
	for _, i := range sc.KeyIdx {
		if i >= c.New.Len() || c.New.Kinds[i] != pgoutput.ValueText {
			return nil, nil, nil, false
		}
		cols = append(cols, sc.Columns[i].Name)
		types = append(types, sc.Columns[i].PgType)
		vals = append(vals, c.New.Values[i])
	}
	return cols, types, vals, true
}

// fillUnchanged replaces r's TOAST-unchanged markers by the values read from
// the source, where the row still exists.
func (s *session) fillUnchanged(ctx context.Context, t *tableState, r *batch.Row, c *pgoutput.Change) error {
	if s.o.Fetch == nil {
		return nil
	}
	sc := t.schema
	keyCols, keyTypes, keyVals, ok := s.newKey(t, c)
	if !ok {
		return nil // a key value we do not have: keep the markers
	}
	vals, found, err := s.o.Fetch(ctx, t.info.Name, s.txXid, keyCols, keyTypes, keyVals, r.Unchanged)
	if err != nil {
		return fmt.Errorf("reading unchanged TOAST values of a moved %s row: %w", t.info.Name, err)
	}
	if !found {
		return nil
	}
	for j, name := range r.Unchanged {
		for i := range sc.Columns {
			if sc.Columns[i].Name == name {
				if vals[j] == nil {
					r.Kinds[i], r.Values[i] = batch.Null, nil
				} else {
					r.Kinds[i], r.Values[i] = batch.Text, vals[j]
				}
			}
		}
	}
	r.Unchanged = r.Unchanged[:0]
	return nil
}

// moved reports whether an update changed a key column or the routing
// column (an old key or old tuple is present and differs from the new row).
func (s *session) moved(sc *batch.Schema, c *pgoutput.Change) bool {
	diff := func(i int) bool {
		ok, nk := c.Old.Kinds[i], c.New.Kinds[i]
		if ok == pgoutput.ValueUnchanged || nk == pgoutput.ValueUnchanged {
			return false
		}
		return ok != nk || !bytes.Equal(c.Old.Values[i], c.New.Values[i])
	}
	for _, i := range sc.KeyIdx {
		if diff(i) {
			return true
		}
	}
	// With a 'K' tuple the routing column is in it only when it is part of
	// the identity (validated at start unless the table is FULL).
	if c.OldKind == 'K' && !slices.Contains(sc.KeyIdx, sc.RoutingIdx) {
		return false
	}
	return diff(sc.RoutingIdx)
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
	first, last := t.b.First(), t.b.Last()
	rec := t.b.Cut()
	s.groupRows -= rows
	s.groupBytes -= bytes
	body, err := arrowcodec.Encode(rec)
	rec.Release()
	if err != nil {
		return fmt.Errorf("encoding batch of %s: %w", t.info.Name, err)
	}
	if s.o.MaxPayload > 0 && len(body) > s.o.MaxPayload {
		return s.halt(ctx, t, "too_large", fmt.Errorf("%w: %d rows of %s encode to %d bytes (max %d); raise nats.max_payload", ErrTooLarge, rows, t.info.Name, len(body), s.o.MaxPayload))
	}
	o := batchOut(t.info.Name, t.schema.Fingerprint, first, last, through, rows, body)
	o.Span = s.span(o)
	return s.send(ctx, o)
}

// batchOut builds a CHANGES data message.
func batchOut(table, fingerprint string, first, last proto.Position, through proto.LSN, rows int, body []byte) Out {
	id := proto.ChangesMsgID(table, first, last)
	h := make(nats.Header, 10)
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderTable, table)
	h.Set(proto.HeaderSchema, fingerprint)
	h.Set(proto.HeaderFirst, first.String())
	h.Set(proto.HeaderLast, last.String())
	h.Set(proto.HeaderThrough, through.String())
	h.Set(proto.HeaderRows, strconv.Itoa(rows))
	h.Set(proto.HeaderMsgID, id)
	return Out{Msg: &nats.Msg{Subject: proto.ChangesSubject(table), Header: h, Data: body}, ID: id, Through: through, Table: table, Rows: rows}
}

// span starts the root span of a batch's trace and injects it.
func (s *session) span(o Out) trace.Span {
	return startSpan(s.o.Tracer, o)
}

func startSpan(tr trace.Tracer, o Out) trace.Span {
	if tr == nil {
		return nil
	}
	ctx, sp := tr.Start(context.Background(), "publish "+o.Msg.Subject, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", o.Msg.Subject),
			attribute.String("messaging.message.id", o.ID),
			attribute.Int("messaging.batch.message_count", o.Rows),
			attribute.Int("messaging.message.body.size", len(o.Msg.Data)),
			attribute.String("sluice.table", o.Table),
			attribute.String("sluice.first", o.Msg.Header.Get(proto.HeaderFirst)),
			attribute.String("sluice.last", o.Msg.Header.Get(proto.HeaderLast)),
		))
	natsotel.Inject(ctx, o.Msg.Header)
	return sp
}

func encode(rec arrow.RecordBatch) ([]byte, error) {
	defer rec.Release()
	return arrowcodec.Encode(rec)
}
