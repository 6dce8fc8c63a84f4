package capture

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
)

// Column kinds the stream carried. A column whose type changes at the
// source changes its kind, and the catalog keeps a kind per column per
// table generation: the new kind opens the next generation, which holds
// only the rows sent since (docs/adr/0028-table-generations.md). So a kind
// change halts the table until a resync copies it again under the new
// kind. A Relation message is compared with the kinds the stream last
// carried for its table, remembered across sessions and restarts (the
// state database), not only with the session's previous Relation: a type
// changed before the table's first change in a session, or while the
// reader was down, halts it as well.

// Kinds are a table's column kinds by name: every column the stream
// carried since the table's last resync (a dropped column keeps its kind,
// so adding it back with another type is a kind change too).
type Kinds map[string]proto.Kind

// SaveKindsFunc persists a table's Kinds (replacing what was saved).
type SaveKindsFunc func(ctx context.Context, table string, k Kinds) error

// KnownKinds are the Kinds of every captured table, loaded at start and
// kept in step with the stream. Safe for concurrent use.
type KnownKinds struct {
	mu    sync.Mutex
	kinds map[string]Kinds
	save  SaveKindsFunc
}

// NewKnownKinds starts from loaded (the saved Kinds by table) and persists
// changes with save (nil: in memory only).
func NewKnownKinds(loaded map[string]Kinds, save SaveKindsFunc) *KnownKinds {
	k := &KnownKinds{kinds: map[string]Kinds{}, save: save}
	for t, ks := range loaded {
		k.kinds[t] = maps.Clone(ks)
	}
	return k
}

// Changed returns the first column of cols whose kind differs from the
// kind known for it, with that kind; ok is false when none does (or k is
// nil).
func (k *KnownKinds) Changed(table string, cols []batch.Column) (col batch.Column, was proto.Kind, ok bool) {
	if k == nil {
		return batch.Column{}, "", false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	known := k.kinds[table]
	for _, c := range cols {
		if old, has := known[c.Name]; has && old != c.Kind {
			return c, old, true
		}
	}
	return batch.Column{}, "", false
}

// Note records sc's column kinds as carried for its table, merged into the
// known ones. It persists a change before returning, so no pack of a new
// kind is sent before the kind is known across a restart.
func (k *KnownKinds) Note(ctx context.Context, sc *batch.Schema) error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	known := k.kinds[sc.Table]
	next := maps.Clone(known)
	if next == nil {
		next = Kinds{}
	}
	for _, c := range sc.Columns {
		next[c.Name] = c.Kind
	}
	if maps.Equal(next, known) {
		return nil
	}
	if k.save != nil {
		if err := k.save(ctx, sc.Table, next); err != nil {
			return fmt.Errorf("recording the column kinds of %s: %w", sc.Table, err)
		}
	}
	k.kinds[sc.Table] = next
	return nil
}

// Forget drops what is known of table: a resync makes it stream again and
// copies all of it under its current schema, so the first schema noted
// after that (the copy's, or the stream's) is all there is. What was saved
// stays until then: a restart before it finds the table still halted.
func (k *KnownKinds) Forget(table string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	delete(k.kinds, table)
	k.mu.Unlock()
}
