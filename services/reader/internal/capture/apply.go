package capture

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
)

// apply turns the decoded change (s.change) of table t into its output
// rows: the row image, a move's tombstone of the old identity, unchanged
// TOAST values a move must carry, generated columns, values carried by
// reference.
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
	moved := c.Op == pgoutput.TypeUpdate && c.OldKind != 0 && s.moved(sc, c)
	if !moved && !t.gen.computable(r) {
		// Only when a column's storage changed since the start's check.
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		return s.halt(ctx, t, "generated", fmt.Errorf("%s: an update left a TOASTed input of a generated column unchanged and changed another, so its value cannot be computed; run ALTER TABLE %s REPLICA IDENTITY FULL; and resync it", t.info.Name, t.info.Name))
	}
	if !moved && len(r.Unchanged) > 0 && t.window != nil && !s.o.Resync.NoWindowFillForTest {
		// Inside a resync chunk's window the chunk's copy of a key the
		// stream changes is dropped (the stream's version wins), and the
		// resync's clear, at its first chunk's LW, removes the older rows
		// that hold the values this update leaves unchanged: nothing would
		// be left to fill them from. Read them from the source, as for a
		// move; a value newer than the change is carried by a later one.
		if err := s.fillUnchanged(ctx, t, r, c); err != nil {
			return err
		}
	}
	var m *batch.Row
	if moved {
		m = &s.moveRow
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
	if err := s.fillGenerated(ctx, t, r, c); err != nil {
		return err
	}
	s.touch(t, r)
	if m != nil {
		s.touch(t, m)
	}
	if pickClaims(s.o, sc, r) {
		return s.addClaimed(ctx, t, m, r)
	}
	if m != nil {
		if err := s.add(ctx, t, m); err != nil || t.halted {
			return err
		}
	}
	return s.add(ctx, t, r)
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
		return fmt.Errorf("reading unchanged TOAST values of a %s row: %w", t.info.Name, err)
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
