package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/shared/catalog"
)

// CatalogReads serves Reads from the catalog.
type CatalogReads struct{ C *catalog.Catalog }

// Snapshots lists the published snapshots, oldest first.
func (r CatalogReads) Snapshots(ctx context.Context) ([]Snapshot, error) {
	snaps, err := r.C.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Snapshot, len(snaps))
	for i, s := range snaps {
		out[i] = Snapshot{Version: s.Version, PublishedAt: s.PublishedAt, ThroughLSN: s.Through, Packs: int64(s.Packs)}
	}
	return out, nil
}

// Rows reads one page.
func (r CatalogReads) Rows(ctx context.Context, q RowsQuery) (RowsPage, error) {
	p, err := r.C.Read(ctx, catalog.ReadRequest{
		Destination: q.Destination, Table: q.Table, Version: q.Snapshot,
		Cursor: q.After, Limit: q.Limit, SystemColumns: q.SystemColumns,
	})
	switch {
	case errors.Is(err, catalog.ErrNoSnapshot), errors.Is(err, catalog.ErrUnknownTable):
		return RowsPage{}, fmt.Errorf("%w: %v", ErrNotFound, err)
	case errors.Is(err, catalog.ErrBadCursor):
		return RowsPage{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	case err != nil:
		return RowsPage{}, err
	}
	return RowsPage{Snapshot: p.Version, Rows: p.Rows, Next: p.Next}, nil
}
