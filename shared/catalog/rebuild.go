package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// RebuildStats counts what Rebuild did.
type RebuildStats struct {
	Packs, Rows, Corrupt int
	Version              uint64 // the snapshot published over every pack
	Floor                uint64 // the highest version published before the rebuild
}

// Rebuild drops every catalog object of the prefix (but the version floor),
// recreates the schema,
// re-indexes every pack in store (per-destination packs and segments) and publishes one snapshot holding them all
// (through_lsn 0: the publisher's next snapshot claims the frontier), numbered above every
// version published before: a version pinned before the rebuild is never
// reused, and reading it fails with ErrRebuiltPast.
// Stop every indexer and publisher first. A corrupt pack is skipped and
// counted; packs are the source of truth and this never edits them.
func Rebuild(ctx context.Context, conn Conn, store packstore.Store, opts Options) (RebuildStats, error) {
	var st RebuildStats
	c := New(conn, opts)
	// Versions never repeat: the highest version the old catalog published
	// or claimed is recorded in the version floor before anything is
	// dropped, and the rebuilt catalog numbers above it.
	floor, err := c.recordVersionFloor(ctx)
	if err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	st.Floor = floor
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
	// The per-destination packs, then the segments.
	visit := func(path string) error {
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
	}
	err = store.List(ctx, "", visit)
	if err == nil {
		err = store.List(ctx, proto.SegmentsDir+"/", visit)
	}
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
	// One publish admits every pack: its row records the high-water, it
	// lists nothing.
	res, err := c.Publish(ctx, l, ttl, 0)
	if err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	st.Version = res.Snapshot.Version
	if err := c.ReleaseLease(ctx, res.Lease); err != nil {
		return st, fmt.Errorf("rebuilding catalog: %w", err)
	}
	return st, nil
}

// versionFloorDDL creates the version floor: one row per rebuild, the
// highest version published (or claimed) before it. It is created with the
// schema and outlives Drop (objects never lists it).
func versionFloorDDL(n names) string {
	return "CREATE TABLE IF NOT EXISTS " + ident(n.versionFloor()) + " (version UInt64, recorded_at Int64) ENGINE = MergeTree ORDER BY version"
}

// recordVersionFloor reads the highest version the catalog as it stands
// published or claimed (its watermark and lease tables, of whatever schema
// version, and the floor of earlier rebuilds) and records it in the version
// floor, before the rebuild drops anything: a rebuild that dies half way
// and is run again still numbers above it. It returns the floor.
func (c *Catalog) recordVersionFloor(ctx context.Context) (uint64, error) {
	objs, err := c.objects(ctx)
	if err != nil {
		return 0, err
	}
	if err := c.conn.Exec(ctx, versionFloorDDL(c.n)); err != nil {
		return 0, fmt.Errorf("creating the version floor: %w", err)
	}
	reads := []string{"(SELECT ifNull(max(version), 0) FROM " + ident(c.n.versionFloor()) + ")"}
	for _, t := range []string{c.n.watermark(), c.n.lease()} {
		if _, ok := objs[t]; ok {
			reads = append(reads, "(SELECT ifNull(max(version), 0) FROM "+ident(t)+")")
		}
	}
	q := "SELECT greatest(" + strings.Join(reads, ", ") + ", 0)"
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("reading the highest published version before the rebuild: %w", err)
	}
	floor := asUint(res.Rows[0][0])
	if floor == 0 {
		return 0, nil
	}
	if err := c.conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (version, recorded_at) VALUES (%d, %s)", ident(c.n.versionFloor()), floor, nowMicros)); err != nil {
		return 0, fmt.Errorf("recording the version floor %d: %w", floor, err)
	}
	c.log.Info("rebuild: versions continue above the old catalog's", "floor", floor)
	return floor, nil
}

// missingVersion is the error for a version the watermark does not hold:
// ErrNoSnapshot, and ErrRebuiltPast as well when the version is at or
// below the version floor (it was published before a rebuild, and its
// snapshot no longer exists).
func (c *Catalog) missingVersion(ctx context.Context, version uint64) error {
	res, err := c.conn.Query(ctx, "SELECT ifNull(max(version), 0) FROM "+ident(c.n.versionFloor())+tiny)
	if err == nil && len(res.Rows) == 1 {
		if floor := asUint(res.Rows[0][0]); version <= floor {
			return fmt.Errorf("%w: %w: version %d was published before the catalog was rebuilt; the rebuilt catalog's versions start above %d", ErrNoSnapshot, ErrRebuiltPast, version, floor)
		}
	}
	return fmt.Errorf("%w: version %d", ErrNoSnapshot, version)
}
