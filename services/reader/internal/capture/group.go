package capture

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
)

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
