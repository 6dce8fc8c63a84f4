package catalog

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

// PackInfo is one indexed pack of a destination as the inventory records
// it.
type PackInfo struct {
	PackID     string    `json:"pack_id"`
	Table      string    `json:"table"`
	Rows       int64     `json:"rows"`
	Tombstones int64     `json:"tombstones"`
	Bytes      int64     `json:"bytes"`
	FirstLSN   string    `json:"first_lsn"`
	LastLSN    string    `json:"last_lsn"`
	IndexedAt  time.Time `json:"indexed_at"`
	Trace      string    `json:"traceparent,omitempty"` // of the flush that wrote it
}

// RecentPacks returns destination's newest indexed packs (by their last
// position), at most limit, newest first: published or not yet.
func (c *Catalog) RecentPacks(ctx context.Context, destination string, limit int) ([]PackInfo, error) {
	if err := proto.ValidateDestination(destination); err != nil {
		return nil, err
	}
	q := "SELECT pack_id, table, rows, tombstones, bytes, first_lsn, last_lsn, indexed_at, trace FROM " + ident(c.n.packs()) +
		" WHERE destination = " + quote(destination) + " ORDER BY last_lsn DESC, last_seq DESC LIMIT 1 BY store_id, pack_id LIMIT " + strconv.Itoa(limit)
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("reading the recent packs of %s: %w", destination, err)
	}
	out := make([]PackInfo, 0, len(res.Rows))
	for _, r := range res.Rows {
		out = append(out, PackInfo{
			PackID: asString(r[0]), Table: asString(r[1]), Rows: asInt(r[2]), Tombstones: asInt(r[3]), Bytes: asInt(r[4]),
			FirstLSN: proto.LSN(asUint(r[5])).String(), LastLSN: proto.LSN(asUint(r[6])).String(),
			IndexedAt: time.UnixMicro(asInt(r[7])).UTC(), Trace: asString(r[8]),
		})
	}
	return out, nil
}
