package api

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
	"github.com/sluice-cdc/sluice/shared/catalog"
)

// CatalogReads serves Reads from the catalog.
type CatalogReads struct{ C *catalog.Catalog }

// Snapshots returns one page of the retained snapshots, oldest first.
func (r CatalogReads) Snapshots(ctx context.Context, q SnapshotsQuery) (SnapshotsPage, error) {
	snaps, next, err := r.C.RetainedSnapshots(ctx, catalog.SnapshotPage{Before: q.Before, Limit: q.Limit})
	if err != nil {
		return SnapshotsPage{}, err
	}
	out := make([]Snapshot, len(snaps))
	for i, s := range snaps {
		out[i] = Snapshot{Version: s.Version, PublishedAt: s.PublishedAt, ThroughLSN: s.Through, Packs: int64(s.Packs), Pinned: s.Pinned, PinReason: s.PinReason}
	}
	return SnapshotsPage{Snapshots: out, Next: next}, nil
}

// Newest returns the newest published snapshot (nil when none is), in one
// statement (catalog.Newest).
func (r CatalogReads) Newest(ctx context.Context) (*Snapshot, error) {
	s, err := r.C.Newest(ctx)
	if errors.Is(err, catalog.ErrNoSnapshot) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &Snapshot{Version: s.Version, PublishedAt: s.PublishedAt, ThroughLSN: s.Through, Packs: int64(s.Packs), Pinned: s.Pinned, PinReason: s.PinReason}, nil
}

// Rows reads one page.
func (r CatalogReads) Rows(ctx context.Context, q RowsQuery) (RowsPage, error) {
	p, err := r.C.Read(ctx, catalog.ReadRequest{
		Destination: q.Destination, Table: q.Table, Version: q.Snapshot,
		Cursor: q.After, Limit: q.Limit, SystemColumns: q.SystemColumns,
	})
	if err != nil {
		return RowsPage{}, apiError(err)
	}
	return RowsPage{Snapshot: p.Version, Rows: p.Rows, Next: p.Next}, nil
}

// Changes reads one page of the change feed.
func (r CatalogReads) Changes(ctx context.Context, q ChangesQuery) (ChangesPage, error) {
	p, err := r.C.Changes(ctx, catalog.ChangesRequest{
		Destination: q.Destination, Table: q.Table, From: q.From, To: q.To, Cursor: q.After, Limit: q.Limit,
	})
	if err != nil {
		return ChangesPage{}, apiError(err)
	}
	return p, nil
}

// Columns returns a table's columns (of its latest registered schema).
func (r CatalogReads) Columns(ctx context.Context, table string) ([]export.Column, error) {
	ti, err := r.C.Table(ctx, table)
	if errors.Is(err, catalog.ErrUnknownTable) {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	cols := make([]export.Column, len(ti.Columns))
	for i, c := range ti.Columns {
		cols[i] = export.Column{Name: c.Name, Kind: c.Kind}
	}
	return cols, nil
}

// Tables lists the tables destination holds packs of at snapshot version.
func (r CatalogReads) Tables(ctx context.Context, destination string, version uint64) ([]string, error) {
	byTable, err := r.C.Destinations(ctx, version)
	switch {
	case errors.Is(err, catalog.ErrNoSnapshot):
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	case err != nil:
		return nil, err
	}
	var out []string
	for table, dests := range byTable {
		if slices.Contains(dests, destination) {
			out = append(out, table)
		}
	}
	slices.Sort(out)
	return out, nil
}

// RecentPacks returns destination's newest indexed packs.
func (r CatalogReads) RecentPacks(ctx context.Context, destination string, limit int) ([]catalog.PackInfo, error) {
	return r.C.RecentPacks(ctx, destination, limit)
}

// Pin pins a retained snapshot.
func (r CatalogReads) Pin(ctx context.Context, version uint64, reason string) (Pin, error) {
	p, err := r.C.PinSnapshot(ctx, version, reason)
	if err != nil {
		return Pin{}, apiError(err)
	}
	return Pin{Version: p.Version, Pinned: true, Reason: p.Reason, PinnedAt: p.PinnedAt}, nil
}

// Unpin removes a snapshot's pin.
func (r CatalogReads) Unpin(ctx context.Context, version uint64) error {
	return apiError(r.C.UnpinSnapshot(ctx, version))
}

// gone is an expired-snapshot error that answers 410 with the catalog's
// own message (which names the oldest retained version).
type gone struct{ err error }

func (g gone) Error() string   { return g.err.Error() }
func (g gone) Unwrap() []error { return []error{g.err, ErrGone} }

// apiError classifies a catalog error for the API's status codes.
func apiError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, catalog.ErrExpired):
		return gone{err}
	case errors.Is(err, catalog.ErrNoSnapshot), errors.Is(err, catalog.ErrUnknownTable):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	case errors.Is(err, catalog.ErrBadCursor), errors.Is(err, catalog.ErrBadRange):
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	case errors.Is(err, catalog.ErrGenerationChanged):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	}
	return err
}
