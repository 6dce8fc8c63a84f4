package capture

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

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
		r.Columns = slices.Clone(r.Columns)
		t.pendingRel = &r
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
	if r.Identity != 'f' && !t.identityChecked && !slices.ContainsFunc(r.Columns, func(c pgoutput.Column) bool { return c.Key && c.Name == t.info.Routing }) {
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		return s.halt(ctx, t, "replica_identity", fmt.Errorf("%w: %s has REPLICA IDENTITY %q without %s; run ALTER TABLE %s REPLICA IDENTITY FULL; and resync it",
			ErrIdentityChanged, name, string(r.Identity), t.info.Routing, name))
	}
	if s.o.AutoResync != nil {
		// Before the unchanged-columns shortcut below: a last column dropped
		// and added again under its name and type comes back unchanged.
		var curNums ColumnNums
		if s.o.ColumnNums != nil {
			var err error
			if curNums, err = s.o.ColumnNums(ctx, r.ID); err != nil {
				return fmt.Errorf("reading the columns of %s: %w", name, err)
			}
		}
		reason, detail, err := SchemaChange(ctx, s.o.HasDefault, r.ID, LastColumns(s.o.State, t.info), r.Columns, LastColumnNums(s.o.State, t.info), curNums)
		if err != nil {
			return err
		}
		if len(curNums) > 0 {
			s.o.State.SetColumnNums(name, curNums)
		}
		if reason != "" {
			// The new schema streams from here on; the resync re-copies
			// the rows the change rewrote without WAL.
			defer func() {
				if err := s.o.AutoResync(ctx, name, reason, detail); err != nil {
					s.o.Log.Error("queueing the resync of a schema change failed: resync the table", "table", name, "reason", reason, "error", err)
				}
			}()
		}
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
	if c, was, changed := s.kindChange(t, cols); changed {
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		if err := s.halt(ctx, t, "type_changed", fmt.Errorf("%w: %s.%s was %s, is now %s (%s); resync the table", ErrTypeChanged, name, c.Name, was, c.Kind, c.PgType)); err != nil {
			return err
		}
		// The resync streams the table again with this Relation.
		rc := r
		rc.Columns = slices.Clone(r.Columns)
		t.pendingRel = &rc
		return nil
	}
	if t.schema != nil {
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
	if err := s.o.Kinds.Note(ctx, sc); err != nil {
		return err
	}
	t.schema, t.relCols, t.gen = sc, slices.Clone(r.Columns), ge
	t.schemaGen++
	s.o.State.SetColumns(name, t.relCols)
	t.b = batch.NewBuilder(s.o.Mem, sc, s.o.Append)
	return nil
}

// kindChange returns the first column of cols whose kind differs from the
// one the stream carried for it (KnownKinds; without them, the session's
// schema of t), with that kind. A resync that makes the halted table
// stream again (kindsChecked) carries the new kinds.
func (s *session) kindChange(t *tableState, cols []batch.Column) (batch.Column, proto.Kind, bool) {
	if t.kindsChecked {
		return batch.Column{}, "", false
	}
	if s.o.Kinds != nil {
		return s.o.Kinds.Changed(t.info.Name, cols)
	}
	if t.schema == nil {
		return batch.Column{}, "", false
	}
	for _, c := range cols {
		for _, old := range t.schema.Columns {
			if old.Name == c.Name && old.Kind != c.Kind {
				return c, old.Kind, true
			}
		}
	}
	return batch.Column{}, "", false
}
