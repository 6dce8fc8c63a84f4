package capture

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
)

// ClaimFunc writes a value carried by reference (a claim check) durably at
// path, a proto.ClaimPath in the pack store.
type ClaimFunc func(ctx context.Context, path string, data []byte) error

// pickClaims names in r.Claims the columns whose value travels by
// reference: every value over MaxInline, then, largest first, more values
// until the row's inline values fit in MaxInline, so that no row comes near
// nats.max_payload. Key and routing values stay inline (Postgres bounds an
// index entry far below any threshold), and so do values of kinds that are
// not claimable. It reports whether there are any.
func pickClaims(o *Options, sc *batch.Schema, r *batch.Row) bool {
	r.Claims = r.Claims[:0]
	limit := o.MaxInline
	if limit <= 0 || o.Claim == nil {
		return false
	}
	total := 0
	for i, k := range r.Kinds {
		if k == batch.Text {
			total += len(r.Values[i])
		}
	}
	if total <= limit {
		return false
	}
	pinned := func(i int) bool {
		return i == sc.RoutingIdx || slices.Contains(sc.KeyIdx, i) || !claimable(sc.Columns[i].Kind)
	}
	claimed := make([]bool, len(r.Kinds))
	for i, k := range r.Kinds {
		if k == batch.Text && len(r.Values[i]) > limit && !pinned(i) {
			claimed[i] = true
			total -= len(r.Values[i])
		}
	}
	for total > limit {
		big := -1
		for i, k := range r.Kinds {
			if k == batch.Text && !claimed[i] && !pinned(i) && (big < 0 || len(r.Values[i]) > len(r.Values[big])) {
				big = i
			}
		}
		if big < 0 {
			break
		}
		claimed[big] = true
		total -= len(r.Values[big])
	}
	for i, c := range claimed {
		if c {
			r.Claims = append(r.Claims, sc.Columns[i].Name)
		}
	}
	return len(r.Claims) > 0
}

// claimable reports whether values of kind may travel by reference: those
// carried as one string or binary value, whose conversion cannot fail, so the
// flusher that puts them back meets no value the reader would have refused.
// Arrays (and every other kind) stay inline.
func claimable(kind proto.Kind) bool {
	t, err := kind.ArrowType()
	if err != nil {
		return false
	}
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
		return true
	}
	return false
}

// addClaimed writes r's claimed values to the pack store, then publishes the
// table's batch so far and, as a batch of their own (schema WithClaims), the
// change's move-out tombstone m (nil: none) and r. The message that refers
// to an object is published only once the object is durable; a replay
// writes the same paths again.
func (s *session) addClaimed(ctx context.Context, t *tableState, m, r *batch.Row) error {
	claimed, err := writeClaims(ctx, s.o, t.schema, r)
	if err != nil {
		return err
	}
	if err := s.cut(ctx, t, s.clean); err != nil || t.halted {
		return err
	}
	if t.cb == nil {
		t.cb = batch.NewBuilder(s.o.Mem, t.schema.WithClaims(), s.o.Append)
	}
	for _, row := range []*batch.Row{m, r} {
		if row == nil {
			continue
		}
		if err := t.cb.Append(row); err != nil {
			return s.halt(ctx, t, "bad_value", err)
		}
	}
	rec := t.cb.Cut()
	defer rec.Release()
	return s.publishClaimed(ctx, t, t.cb.Schema.Fingerprint, rec, s.clean, claimed)
}

// writeClaims writes r's claimed values (r.Claims) to the pack store at
// their proto.ClaimPath and leaves them NULL in r. It returns their total
// size (proto.HeaderClaimBytes).
func writeClaims(ctx context.Context, o *Options, sc *batch.Schema, r *batch.Row) (int64, error) {
	var total int64
	for _, name := range r.Claims {
		i := slices.IndexFunc(sc.Columns, func(c batch.Column) bool { return c.Name == name })
		if err := o.Claim(ctx, proto.ClaimPath(sc.Table, r.Pos, name), r.Values[i]); err != nil {
			return 0, fmt.Errorf("carrying %d bytes of %s.%s at %s by reference: %w", len(r.Values[i]), sc.Table, name, r.Pos, err)
		}
		o.Metrics.Claims.Inc()
		o.Metrics.ClaimBytes.Add(float64(len(r.Values[i])))
		total += int64(len(r.Values[i]))
		r.Kinds[i], r.Values[i] = batch.Null, nil
	}
	return total, nil
}
