package catalog

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluice-cdc/sluice/proto"
)

// Clears (proto.OpClear, docs/adr/0024-clear.md). A clear row in a
// destination's packs hides every row of that destination's table below
// its position P in each snapshot that holds it. It enters a destination's
// packs at its place in that destination's stream, so a snapshot's
// membership decides whether it applies: no clock, no table-level fact
// with a visibility of its own. Among a snapshot's members the newest
// clear of (destination, table) gives the bound (clears nest: each hides
// everything below it, so the newest hides the union), and the clear row
// itself is no row of the table. The compaction of packs must keep the
// newest clear row of each (destination, table).

// opClear is proto.OpClear as an SQL literal.
var opClear = strconv.Itoa(int(proto.OpClear))

type clearKey struct {
	version            uint64
	destination, table string
}

// cleared is what a snapshot's clears do to a read of one destination's
// table: pred, the predicate the read adds beside its membership, and the
// newest clear's position (at, when has).
type cleared struct {
	pred string
	at   proto.Position
	has  bool
}

// clearPredicate returns the clears of destination's table at the
// published version v for a read with the membership members (the
// predicate members returned): pred admits no clear row, and no row below
// the newest clear among the members. A snapshot's membership never
// changes, so neither does the bound: it is read once per (version,
// destination, table), remembered, and written as a literal.
func (c *Catalog) clearPredicate(ctx context.Context, v uint64, destination string, ti TableInfo, members string) (cleared, error) {
	table := ti.Name
	if c.ignoreClears {
		return cleared{pred: ident(proto.ColOp) + " != " + opClear}, nil
	}
	k := clearKey{v, destination, table}
	c.pubMu.Lock()
	cl, ok := c.clearCache[k]
	c.pubMu.Unlock()
	if ok {
		return cl, nil
	}
	q := fmt.Sprintf("SELECT tupleElement(_sluice_m, 1), tupleElement(_sluice_m, 2), _sluice_n FROM (SELECT max(tuple(%s, %s)) AS _sluice_m, count() AS _sluice_n FROM %s WHERE %s = %s AND %s AND %s = %s)%s",
		ident(proto.ColLSN), ident(proto.ColSeq), c.rowsTable(ti), ident(rowDest), quote(destination), members, ident(proto.ColOp), opClear, c.readLimits.settings())
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return cleared{}, fmt.Errorf("reading the clears of %s of %s at version %d: %w", table, destination, v, err)
	}
	cl.pred = ident(proto.ColOp) + " != " + opClear
	if len(res.Rows) == 1 && asUint(res.Rows[0][2]) > 0 {
		cl.at, cl.has = proto.Position{LSN: proto.LSN(asUint(res.Rows[0][0])), Seq: asUint(res.Rows[0][1])}, true
		cl.pred += fmt.Sprintf(" AND (%s, %s) >= (%d, %d)", ident(proto.ColLSN), ident(proto.ColSeq), uint64(cl.at.LSN), cl.at.Seq)
	}
	c.pubMu.Lock()
	if c.clearCache == nil || len(c.clearCache) >= 256 {
		c.clearCache = map[clearKey]cleared{}
	}
	c.clearCache[k] = cl
	c.pubMu.Unlock()
	return cl, nil
}

// clearedRows is the source of a resolution over several destinations at
// once (the latest view): the rows table restricted to where, each row
// with the bound of its destination's newest clear (_sluice_clear, (0, 0)
// without one). clearedWhere is the predicate to apply over it.
func (c *Catalog) clearedRows(ti TableInfo, where string) string {
	if c.ignoreClears {
		return "(SELECT * FROM " + c.rowsTable(ti) + " WHERE " + where + ")"
	}
	pos := "(" + ident(proto.ColLSN) + ", " + ident(proto.ColSeq) + ")"
	return fmt.Sprintf("(SELECT *, max(if(%s = %s, %s, (toUInt64(0), toUInt64(0)))) OVER (PARTITION BY %s) AS _sluice_clear FROM %s WHERE %s)",
		ident(proto.ColOp), opClear, pos, ident(rowDest), c.rowsTable(ti), where)
}

// clearedWhere is the predicate over clearedRows: no clear row, nothing
// below its destination's bound.
func (c *Catalog) clearedWhere() string {
	if c.ignoreClears {
		return ident(proto.ColOp) + " != " + opClear
	}
	return ident(proto.ColOp) + " != " + opClear + " AND (" + ident(proto.ColLSN) + ", " + ident(proto.ColSeq) + ") >= _sluice_clear"
}
