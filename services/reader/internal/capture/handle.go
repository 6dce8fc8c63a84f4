package capture

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
)

func (s *session) handle(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if s.protocol >= 2 {
		if ok, err := s.streamed(ctx, data); ok || err != nil {
			return err
		}
	}
	switch data[0] {
	case pgoutput.TypeBegin:
		b, err := pgoutput.DecodeBegin(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		return s.begin(ctx, b)
	case pgoutput.TypeCommit:
		c, err := pgoutput.DecodeCommit(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		return s.commit(ctx, c)
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
	case pgoutput.TypeMessage:
		m, err := pgoutput.DecodeMessage(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		return s.message(ctx, m)
	case pgoutput.TypeTruncate:
		tr, err := pgoutput.DecodeTruncate(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplication, err)
		}
		// The TRUNCATE takes the next ordinal of its transaction: its changes
		// before it are below the clear, those after it above. One ordinal
		// for every relation it names (each clear is of its own table).
		// CASCADE and RESTART IDENTITY need nothing more: pgoutput names
		// every table the cascade truncated, and identity values are not rows.
		s.seq++
		pos := proto.Position{LSN: proto.LSN(s.txLSN), Seq: s.seq}
		for _, id := range tr.Relations {
			t := s.rels[id]
			if t == nil || t.halted {
				continue
			}
			if err := s.EmitClear(ctx, t.info.Name, nil, pos); err != nil {
				return err
			}
		}
	}
	return nil
}

// begin starts a transaction (a Begin, or a streamed transaction's commit
// replayed: spill.go).
func (s *session) begin(ctx context.Context, b pgoutput.Begin) error {
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
	return nil
}

// commit ends the transaction begin started.
func (s *session) commit(ctx context.Context, c pgoutput.Commit) error {
	s.inTx = false
	s.lastEnd = proto.LSN(c.EndLSN)
	if s.groupRows == 0 {
		s.clean = s.lastEnd
		return nil
	}
	if s.groupRows >= s.o.BatchRows || s.groupBytes >= s.o.BatchBytes {
		return s.flushAll(ctx, s.lastEnd)
	}
	return nil
}
