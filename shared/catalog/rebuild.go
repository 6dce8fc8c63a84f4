package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-cdc/sluice/shared/packstore"
)

// RebuildStats counts what Rebuild did.
type RebuildStats struct {
	Packs, Rows, Corrupt int
	Version              uint64 // the snapshot published over every pack
}

// Rebuild drops every catalog object of the prefix, recreates the schema,
// re-indexes every pack in store and publishes snapshots holding them all
// (one, unless the store holds more than a publish admits; through_lsn 0:
// the publisher's next snapshot claims the frontier).
// Stop every indexer and publisher first. A corrupt pack is skipped and
// counted; packs are the source of truth and this never edits them.
func Rebuild(ctx context.Context, conn Conn, store packstore.Store, opts Options) (RebuildStats, error) {
	var st RebuildStats
	c := New(conn, opts)
	if err := c.Drop(ctx); err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	if err := c.EnsureSchema(ctx); err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	var batch []PackRef
	var rows int64
	flush := func() error {
		s, err := c.Index(ctx, store, batch)
		if err != nil {
			return err
		}
		st.Packs += s.Packs
		st.Rows += s.Rows
		batch, rows = batch[:0], 0
		return nil
	}
	err := store.List(ctx, "", func(path string) error {
		ref, err := ReadRef(ctx, store, path)
		if errors.Is(err, packstore.ErrCorruptPack) || errors.Is(err, ErrPackMismatch) {
			c.log.Warn("rebuild: skipping unreadable pack", "path", path, "err", err)
			st.Corrupt++
			return nil
		}
		if err != nil {
			return err
		}
		batch = append(batch, ref)
		rows += ref.Meta.Rows
		if rows >= 100000 || len(batch) >= 256 {
			return flush()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	if err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	const ttl = 30 * time.Second
	l, err := c.AcquireLease(ctx, "rebuild", ttl)
	if err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	// One publish admits at most publishCap packs: publish until one
	// admits fewer (the store may hold more).
	var res PublishResult
	for {
		res, err = c.Publish(ctx, l, ttl, 0)
		if err != nil {
			return st, fmt.Errorf("rebuilding catalog: %w", err)
		}
		l = res.Lease
		st.Version = res.Snapshot.Version
		if res.Snapshot.NewPacks < uint64(publishCap) {
			break
		}
	}
	if err := c.ReleaseLease(ctx, res.Lease); err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	return st, nil
}
