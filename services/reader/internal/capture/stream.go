package capture

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
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
	// Kinds are the column kinds the stream carried (kinds.go); nil: a
	// kind is compared only with the session's previous Relation.
	Kinds *KnownKinds
	Fetch FetchFunc
	// DescribeGenerated lists a relation's stored generated columns (on
	// each Relation message); nil: the table's as described at start.
	DescribeGenerated func(ctx context.Context, relid uint32) ([]source.Generated, error)
	Eval              EvalFunc
	// AutoResync queues a resync of a table whose Relation message shows a
	// schema change that rewrote its rows without WAL (schemachange.go);
	// HasDefault tells an added column's default. nil: none.
	AutoResync AutoResyncFunc
	// BackfillClear makes Backfill follow each table's copy with a clear of
	// the table below the copy (every destination): a copy that replaces
	// what the destinations hold (a lost slot's, a redo's) must also remove
	// the rows the source no longer has.
	BackfillClear bool
	HasDefault    HasDefaultFunc
	// ColumnNums reads a relation's attnums on each Relation message, to
	// tell a column dropped and added again in its old place. nil: only
	// the column order tells.
	ColumnNums ColumnNumsFunc
	Publish    PublishFunc
	// Resync hands live resync chunks to the stream (resync.go); nil: the
	// marks are ignored.
	Resync  *Resyncer
	Log     *slog.Logger
	Metrics *Metrics
	Tracer  trace.Tracer
	State   *State

	// Protocol is source.protocol: the pgoutput protocol version, 0 for
	// the default (2 from Postgres 14 on: in-progress transactions stream
	// to SpillDir before their commit; spill.go).
	Protocol int
	// SpillDir holds the spill files of streamed transactions (a cache:
	// every session starts by removing them).
	SpillDir string

	// ReplayAbortedForTest replays the changes of a streamed transaction's
	// aborted subtransactions (a test's negative control).
	ReplayAbortedForTest bool
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

	window     *window            // a resync chunk between its LW and HW
	xids       xidRing            // the table's last transactions
	pendingRel *pgoutput.Relation // the latest Relation sent while halted (a resync makes it stream again)
	// identityChecked: the resync that makes the table stream again checked
	// its replica identity at the source (pendingRel can predate the fix).
	identityChecked bool
	// kindsChecked: likewise for its column kinds, which the resync copies
	// anew (kinds.go).
	kindsChecked bool
	// schemaGen counts the schemas the session adopted for the table (a
	// resync window remembers it: resync.go publishChunk).
	schemaGen int
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
	keyBuf   []byte
	change   pgoutput.Change
	inTx     bool
	inStream bool   // between Stream Start and Stream Stop (protocol 2)
	protocol int    // the session's pgoutput protocol version
	spills   spills // streamed transactions not yet committed or aborted
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
	loadTables := func() {
		for name, t := range o.Tables {
			ts := &tableState{info: t}
			if o.State.Halted(name) != "" {
				ts.halted = true
			}
			s.tables[name] = ts
		}
	}
	if o.Resync != nil {
		o.Resync.sessionStarted(loadTables)
	} else {
		loadTables()
	}
	defer func() {
		for _, t := range s.tables {
			t.release()
		}
	}()
	major, err := serverMajor(conn)
	if err != nil {
		return start, err
	}
	if s.protocol, err = Protocol(o.Protocol, major); err != nil {
		return start, err
	}
	s.spills.dir = o.SpillDir
	if s.protocol >= 2 {
		if o.SpillDir == "" {
			return start, fmt.Errorf("%w: protocol 2 without a spill directory", ErrSpill)
		}
		if err := clearSpills(o.SpillDir); err != nil {
			return start, err
		}
		defer func() {
			s.spills.close()
			s.spillShown()
		}()
	}
	args := protocolArgs(s.protocol, o.Publication)
	if err := pglogrepl.StartReplication(ctx, conn, o.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return start, fmt.Errorf("%w: starting replication of slot %s at %s: %w", ErrReplication, o.Slot, start, err)
	}
	o.State.SetPhase("streaming")
	o.Log.Info("streaming", "slot", o.Slot, "from", start.String(), "protocol", s.protocol)
	err = s.loop(ctx)
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
	if o.onAck != nil {
		o.onAck()
	}
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
			if err := s.status(); err != nil {
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
				if !s.inTx && !s.inStream {
					s.observeIdle(proto.LSN(ka.ServerWALEnd), time.Now())
				}
				if ka.ReplyRequested {
					if err := s.status(); err != nil {
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
func (s *session) status() error {
	c := proto.LSN(s.tracker.Confirmed())
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(c), WALFlushPosition: pglogrepl.LSN(c), WALApplyPosition: pglogrepl.LSN(c),
	})
	if err != nil {
		return fmt.Errorf("%w: sending standby status: %w", ErrReplication, err)
	}
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
		if err := s.status(); err != nil {
			return err
		}
	}
	if s.oldestPending.IsZero() {
		s.oldestPending = time.Now()
	}
	return s.pipe.Send(ctx, o)
}

// serverMajor is the connected server's major version (server_version,
// reported at connection start).
func serverMajor(conn *pgconn.PgConn) (int, error) {
	v := conn.ParameterStatus("server_version")
	digits := strings.FieldsFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if len(digits) == 0 {
		return 0, fmt.Errorf("%w: reading the server version from %q", ErrReplication, v)
	}
	major, err := strconv.Atoi(digits[0])
	if err != nil {
		return 0, fmt.Errorf("%w: reading the server version from %q", ErrReplication, v)
	}
	return major, nil
}
