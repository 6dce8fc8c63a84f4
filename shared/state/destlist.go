package state

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/proto"
)

// KnownDestination is one destination the state database knows: it has a
// cursor (it has been flushed) or a lifecycle row (it has been paused,
// drained, retired or resumed, possibly ahead of its first row). State is
// Active when it has no lifecycle row.
type KnownDestination struct {
	Destination string           `json:"destination"`
	State       DestinationState `json:"state"`
	Reason      string           `json:"reason,omitempty"`
	ChangedAt   *time.Time       `json:"changed_at,omitempty"` // of the lifecycle row
	// The cursor, when it has one: its partition, position and when it
	// last moved.
	Partition *int       `json:"partition,omitempty"`
	Cursor    string     `json:"cursor,omitempty"` // proto.Position text form, LSN:seq
	FlushedAt *time.Time `json:"flushed_at,omitempty"`
}

// ListOptions page a List: destinations named after After (keyset), at
// most Limit of them (DefaultListLimit when 0, MaxListLimit at most),
// only in State when it is set, only the destination Name when it is set.
type ListOptions struct {
	State DestinationState
	Name  string
	After string
	Limit int
}

// List page bounds.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 10000
)

// List returns a page of known destinations in name order, and whether
// more may follow (then pass the last name as After). Each page is a keyset
// read: an index range on each table, limited, so a page costs the same at
// the millionth destination as at the first.
func (s *DestinationStates) List(ctx context.Context, o ListOptions) ([]KnownDestination, bool, error) {
	if o.State != "" && !o.State.Valid() {
		return nil, false, fmt.Errorf("listing destinations: %w: unknown state %q", ErrBadArgument, o.State)
	}
	limit := o.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	st := pgx.Identifier{s.schema, "destination_states"}.Sanitize()
	ct := pgx.Identifier{s.schema, "cursors"}.Sanitize()
	// Each branch takes at most limit+1 names past After in index order;
	// the first limit+1 of their union are the page (and one more tells
	// whether another page follows). Destinations with only a cursor are
	// active, so that branch runs only when active ones are wanted.
	q := `WITH page AS (
		SELECT destination FROM (
			(SELECT c.destination FROM ` + ct + ` c
			 WHERE c.destination > $1 AND $2 IN ('', 'active') AND ($4 = '' OR c.destination = $4)
			   AND ($2 = '' OR NOT EXISTS (SELECT 1 FROM ` + st + ` s WHERE s.destination = c.destination AND s.state <> 'active'))
			 ORDER BY c.destination LIMIT $3)
			UNION
			(SELECT s.destination FROM ` + st + ` s
			 WHERE s.destination > $1 AND ($2 = '' OR s.state = $2) AND ($4 = '' OR s.destination = $4)
			 ORDER BY s.destination LIMIT $3)
		) u ORDER BY destination LIMIT $3)
	SELECT p.destination, coalesce(s.state, 'active'), coalesce(s.reason, ''), s.changed_at,
	       c.partition, c.lsn, c.seq, c.updated_at
	FROM page p
	LEFT JOIN ` + st + ` s ON s.destination = p.destination
	LEFT JOIN ` + ct + ` c ON c.destination = p.destination
	ORDER BY p.destination`
	rows, err := s.pool.Query(ctx, q, o.After, string(o.State), limit+1, o.Name)
	if err != nil {
		return nil, false, fmt.Errorf("listing destinations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KnownDestination, error) {
		var d KnownDestination
		var part *int
		var lsn, seq *int64
		err := r.Scan(&d.Destination, &d.State, &d.Reason, &d.ChangedAt, &part, &lsn, &seq, &d.FlushedAt)
		if part != nil && lsn != nil && seq != nil {
			d.Partition = part
			d.Cursor = proto.Position{LSN: proto.LSN(*lsn), Seq: uint64(*seq)}.String()
		}
		return d, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("listing destinations: %w", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}
