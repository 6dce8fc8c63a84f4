package pgoutput

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ErrMalformed marks a message that does not follow the pgoutput format
// (protocol versions 1 and 2).
var ErrMalformed = errors.New("malformed pgoutput message")

// Message types (the first byte of every pgoutput message).
const (
	TypeBegin    byte = 'B'
	TypeCommit   byte = 'C'
	TypeOrigin   byte = 'O'
	TypeRelation byte = 'R'
	TypeType     byte = 'Y'
	TypeInsert   byte = 'I'
	TypeUpdate   byte = 'U'
	TypeDelete   byte = 'D'
	TypeTruncate byte = 'T'
	TypeMessage  byte = 'M'
)

// Tuple value kinds.
const (
	ValueNull      byte = 'n'
	ValueUnchanged byte = 'u' // an unchanged TOASTed value: not sent
	ValueText      byte = 't'
	ValueBinary    byte = 'b'
)

// Replica identity settings of a Relation message.
const (
	IdentityDefault byte = 'd'
	IdentityNothing byte = 'n'
	IdentityFull    byte = 'f'
	IdentityIndex   byte = 'i'
)

// pgEpochMicros is 2000-01-01 (the origin of Postgres timestamps) in
// microseconds since the Unix epoch.
const pgEpochMicros = 946684800000000

// Begin starts a transaction.
type Begin struct {
	FinalLSN   uint64 // LSN of the commit record
	CommitTime time.Time
	Xid        uint32
}

// Commit ends a transaction.
type Commit struct {
	Flags      uint8
	CommitLSN  uint64
	EndLSN     uint64 // end of the commit record: the position to confirm
	CommitTime time.Time
}

// Column is one column of a Relation.
type Column struct {
	Key     bool // part of the replica identity
	Name    string
	TypeOID uint32
	TypMod  int32
}

// Relation describes a table; it precedes the first change of that table
// in a session and every change after the table's definition changed.
type Relation struct {
	ID        uint32
	Namespace string
	Name      string
	Identity  byte
	Columns   []Column
}

// Tuple is one row image. Kinds[i] is one of the Value* bytes; Values[i]
// aliases the decoded buffer.
type Tuple struct {
	Kinds  []byte
	Values [][]byte
}

// Len is the number of columns in the tuple.
func (t *Tuple) Len() int { return len(t.Kinds) }

func (t *Tuple) reset() {
	t.Kinds = t.Kinds[:0]
	t.Values = t.Values[:0]
}

// Change is an Insert, Update or Delete. Old is set for an Update that
// carries a key ('K') or old ('O') tuple and for every Delete; OldKind says
// which. New is set for Insert and Update.
type Change struct {
	Op       byte // TypeInsert, TypeUpdate, TypeDelete
	Relation uint32
	OldKind  byte // 0, 'K' or 'O'
	Old      Tuple
	New      Tuple
}

// Truncate lists the truncated relations.
type Truncate struct {
	Options   uint8
	Relations []uint32
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: short %s at offset %d of %d", ErrMalformed, what, r.off, len(r.b))
	}
}

func (r *reader) u8(what string) byte {
	if r.err != nil || r.off+1 > len(r.b) {
		r.fail(what)
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16(what string) uint16 {
	if r.err != nil || r.off+2 > len(r.b) {
		r.fail(what)
		return 0
	}
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32(what string) uint32 {
	if r.err != nil || r.off+4 > len(r.b) {
		r.fail(what)
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64(what string) uint64 {
	if r.err != nil || r.off+8 > len(r.b) {
		r.fail(what)
		return 0
	}
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) time(what string) time.Time {
	us := int64(r.u64(what))
	return time.UnixMicro(pgEpochMicros + us).UTC()
}

func (r *reader) cstring(what string) string {
	if r.err != nil {
		return ""
	}
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail(what)
	return ""
}

func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil || n < 0 || r.off+n > len(r.b) {
		r.fail(what)
		return nil
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

func (r *reader) tuple(t *Tuple) {
	t.reset()
	n := int(r.u16("tuple column count"))
	for i := 0; i < n && r.err == nil; i++ {
		k := r.u8("tuple value kind")
		var v []byte
		switch k {
		case ValueNull, ValueUnchanged:
		case ValueText, ValueBinary:
			l := r.u32("tuple value length")
			v = r.bytes(int(l), "tuple value")
		default:
			if r.err == nil {
				r.err = fmt.Errorf("%w: unknown tuple value kind %q", ErrMalformed, k)
			}
		}
		t.Kinds = append(t.Kinds, k)
		t.Values = append(t.Values, v)
	}
}

func (r *reader) done(what string) error {
	if r.err != nil {
		return fmt.Errorf("decoding %s: %w", what, r.err)
	}
	return nil
}

// DecodeBegin decodes a Begin message (including its type byte).
func DecodeBegin(b []byte) (Begin, error) {
	r := reader{b: b, off: 1}
	m := Begin{FinalLSN: r.u64("final lsn"), CommitTime: r.time("commit time"), Xid: r.u32("xid")}
	return m, r.done("begin")
}

// DecodeCommit decodes a Commit message.
func DecodeCommit(b []byte) (Commit, error) {
	r := reader{b: b, off: 1}
	m := Commit{Flags: r.u8("flags"), CommitLSN: r.u64("commit lsn"), EndLSN: r.u64("end lsn"), CommitTime: r.time("commit time")}
	return m, r.done("commit")
}

// DecodeRelation decodes a Relation message.
func DecodeRelation(b []byte) (Relation, error) {
	r := reader{b: b, off: 1}
	m := Relation{ID: r.u32("relation id"), Namespace: r.cstring("namespace"), Name: r.cstring("relation name"), Identity: r.u8("replica identity")}
	n := int(r.u16("column count"))
	for i := 0; i < n && r.err == nil; i++ {
		c := Column{Key: r.u8("column flags")&1 == 1, Name: r.cstring("column name"), TypeOID: r.u32("type oid"), TypMod: int32(r.u32("type modifier"))}
		if r.err == nil {
			m.Columns = append(m.Columns, c)
		}
	}
	return m, r.done("relation")
}

// DecodeChange decodes an Insert, Update or Delete message into c, reusing
// its tuple slices.
func DecodeChange(b []byte, c *Change) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty message", ErrMalformed)
	}
	r := reader{b: b, off: 1}
	c.Op = b[0]
	c.Relation = r.u32("relation id")
	c.OldKind = 0
	c.Old.reset()
	c.New.reset()
	switch c.Op {
	case TypeInsert:
		if k := r.u8("tuple type"); k != 'N' && r.err == nil {
			return fmt.Errorf("decoding insert: %w: tuple type %q, want 'N'", ErrMalformed, k)
		}
		r.tuple(&c.New)
		return r.done("insert")
	case TypeUpdate:
		k := r.u8("tuple type")
		if k == 'K' || k == 'O' {
			c.OldKind = k
			r.tuple(&c.Old)
			k = r.u8("tuple type")
		}
		if k != 'N' && r.err == nil {
			return fmt.Errorf("decoding update: %w: tuple type %q, want 'N'", ErrMalformed, k)
		}
		r.tuple(&c.New)
		return r.done("update")
	case TypeDelete:
		k := r.u8("tuple type")
		if k != 'K' && k != 'O' && r.err == nil {
			return fmt.Errorf("decoding delete: %w: tuple type %q, want 'K' or 'O'", ErrMalformed, k)
		}
		c.OldKind = k
		r.tuple(&c.Old)
		return r.done("delete")
	}
	return fmt.Errorf("%w: message type %q is not a change", ErrMalformed, c.Op)
}

// DecodeTruncate decodes a Truncate message.
func DecodeTruncate(b []byte) (Truncate, error) {
	r := reader{b: b, off: 1}
	n := int(r.u32("relation count"))
	m := Truncate{Options: r.u8("options")}
	for i := 0; i < n && r.err == nil; i++ {
		id := r.u32("relation id")
		if r.err == nil {
			m.Relations = append(m.Relations, id)
		}
	}
	return m, r.done("truncate")
}

// Message is a logical decoding message (pg_logical_emit_message), sent
// when the messages option is on. A non-transactional one arrives outside
// any transaction, at the point of the WAL where it was written.
type Message struct {
	Transactional bool
	// LSN is the end of the message's WAL record (what the decoder passes
	// to the output plugin): a commit record that follows it starts at or
	// after LSN, one that precedes it ends before LSN-1.
	LSN     uint64
	Prefix  string
	Content []byte // aliases the decoded buffer
}

// DecodeMessage decodes a Message (protocol version 1: no xid).
func DecodeMessage(b []byte) (Message, error) {
	r := reader{b: b, off: 1}
	m := Message{Transactional: r.u8("flags")&1 == 1, LSN: r.u64("message lsn"), Prefix: r.cstring("prefix")}
	n := int(r.u32("content length"))
	m.Content = r.bytes(n, "content")
	return m, r.done("message")
}

// Streaming of in-progress transactions (protocol version 2, Postgres 14+,
// the streaming option on). A transaction whose changes pass
// logical_decoding_work_mem is sent in blocks between Stream Start and
// Stream Stop, before its commit; inside a block every Relation, Type,
// Insert, Update, Delete, Truncate and Message carries the xid of its
// (sub)transaction right after its type byte. Stream Commit or Stream
// Abort, outside any block, ends it.
const (
	TypeStreamStart  byte = 'S'
	TypeStreamStop   byte = 'E'
	TypeStreamCommit byte = 'c'
	TypeStreamAbort  byte = 'A'
)

// StreamStart opens a block of a streamed transaction's changes.
type StreamStart struct {
	Xid          uint32 // the top-level transaction
	FirstSegment bool   // the transaction's first block
}

// StreamCommit commits a streamed transaction: its changes all arrived
// in earlier blocks.
type StreamCommit struct {
	Xid        uint32
	Flags      uint8
	CommitLSN  uint64
	EndLSN     uint64
	CommitTime time.Time
}

// StreamAbort aborts a streamed transaction (Subxid == Xid) or one of its
// subtransactions.
type StreamAbort struct {
	Xid    uint32
	Subxid uint32
}

// DecodeStreamStart decodes a Stream Start message.
func DecodeStreamStart(b []byte) (StreamStart, error) {
	r := reader{b: b, off: 1}
	m := StreamStart{Xid: r.u32("xid"), FirstSegment: r.u8("first segment") == 1}
	return m, r.done("stream start")
}

// DecodeStreamCommit decodes a Stream Commit message.
func DecodeStreamCommit(b []byte) (StreamCommit, error) {
	r := reader{b: b, off: 1}
	m := StreamCommit{Xid: r.u32("xid"), Flags: r.u8("flags"), CommitLSN: r.u64("commit lsn"), EndLSN: r.u64("end lsn"), CommitTime: r.time("commit time")}
	return m, r.done("stream commit")
}

// DecodeStreamAbort decodes a Stream Abort message (protocol 2 and 3; the
// abort LSN and time of protocol 4 follow, when present, and are not read).
func DecodeStreamAbort(b []byte) (StreamAbort, error) {
	r := reader{b: b, off: 1}
	m := StreamAbort{Xid: r.u32("xid"), Subxid: r.u32("subxid")}
	return m, r.done("stream abort")
}

// StreamedXid reads the xid of the (sub)transaction of a message inside a
// stream block: b[1:5]. The message as protocol 1 sends it, which the
// decoders above read, is b[0] followed by b[5:]. ok is false for a message
// type that carries no xid.
func StreamedXid(b []byte) (xid uint32, ok bool, err error) {
	if len(b) == 0 {
		return 0, false, fmt.Errorf("%w: empty message", ErrMalformed)
	}
	switch b[0] {
	case TypeRelation, TypeType, TypeInsert, TypeUpdate, TypeDelete, TypeTruncate, TypeMessage:
	default:
		return 0, false, nil
	}
	if len(b) < 5 {
		return 0, false, fmt.Errorf("%w: streamed %q message of %d bytes, no xid", ErrMalformed, b[0], len(b))
	}
	return binary.BigEndian.Uint32(b[1:5]), true, nil
}
