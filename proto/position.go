package proto

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// LSN is a Postgres write-ahead log position.
type LSN uint64

// String renders the LSN in Postgres text form, e.g. 0/16B3748.
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// ParseLSN reads the Postgres text form X/Y.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("parsing LSN %q: want the form X/Y, e.g. 0/16B3748", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parsing LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parsing LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// Position totally orders every change sluice carries: the commit LSN of its
// transaction, then its ordinal within that transaction (starting at 1).
// A backfilled row carries the slot's consistent point and its copy ordinal.
// Position is the version of a row in every destination: the newest wins.
type Position struct {
	LSN LSN
	Seq uint64
}

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	if c := cmp.Compare(p.LSN, q.LSN); c != 0 {
		return c
	}
	return cmp.Compare(p.Seq, q.Seq)
}

// Less reports whether p is strictly before q.
func (p Position) Less(q Position) bool { return p.Compare(q) < 0 }

// IsZero reports whether p is the zero position, before every change.
func (p Position) IsZero() bool { return p == Position{} }

// String renders the position as LSN:seq, e.g. 0/16B3748:12. ParsePosition
// reads it back.
func (p Position) String() string { return p.LSN.String() + ":" + strconv.FormatUint(p.Seq, 10) }

// ParsePosition reads the form written by Position.String. A bare LSN is the
// position of the whole transaction committed there (seq = max).
func ParsePosition(s string) (Position, error) {
	l, q, ok := strings.Cut(s, ":")
	lsn, err := ParseLSN(l)
	if err != nil {
		return Position{}, err
	}
	if !ok {
		return Position{LSN: lsn, Seq: MaxSeq}, nil
	}
	seq, err := strconv.ParseUint(q, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("parsing position %q: %w", s, err)
	}
	return Position{LSN: lsn, Seq: seq}, nil
}

// MaxSeq is the ordinal that sorts after every change of a transaction:
// Position{LSN: c, Seq: MaxSeq} means "everything committed at or before c".
// It is kept inside int64 so that it round-trips through Postgres bigint and
// ClickHouse Int64 columns.
const MaxSeq uint64 = 1<<63 - 1

// Through returns the position that covers every change committed at or
// before lsn.
func Through(lsn LSN) Position { return Position{LSN: lsn, Seq: MaxSeq} }
