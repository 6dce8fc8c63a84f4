package pgoutput

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/jackc/pglogrepl"
)

// The stream messages of protocol 2 decode as pglogrepl's ParseV2 reads
// them, and every truncation is ErrMalformed.
func TestStreamMessages(t *testing.T) {
	be := binary.BigEndian
	start := []byte{TypeStreamStart}
	start = be.AppendUint32(start, 7001)
	start = append(start, 1)
	commit := []byte{TypeStreamCommit}
	commit = be.AppendUint32(commit, 7001)
	commit = append(commit, 0)
	commit = be.AppendUint64(commit, 0x16B3748)
	commit = be.AppendUint64(commit, 0x16B3780)
	commit = be.AppendUint64(commit, 789_000_000)
	abort := []byte{TypeStreamAbort}
	abort = be.AppendUint32(abort, 7001)
	abort = be.AppendUint32(abort, 7003)

	s, err := DecodeStreamStart(start)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pglogrepl.ParseV2(start, false)
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.(*pglogrepl.StreamStartMessageV2); s.Xid != ps.Xid || s.FirstSegment != (ps.FirstSegment == 1) {
		t.Errorf("stream start %+v, pglogrepl %+v", s, ps)
	}
	c, err := DecodeStreamCommit(commit)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = pglogrepl.ParseV2(commit, false); err != nil {
		t.Fatal(err)
	}
	if pc := m.(*pglogrepl.StreamCommitMessageV2); c.Xid != pc.Xid || c.CommitLSN != uint64(pc.CommitLSN) || c.EndLSN != uint64(pc.TransactionEndLSN) || !sameTime(c.CommitTime, pc.CommitTime) {
		t.Errorf("stream commit %+v, pglogrepl %+v", c, pc)
	}
	a, err := DecodeStreamAbort(abort)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = pglogrepl.ParseV2(abort, false); err != nil {
		t.Fatal(err)
	}
	if pa := m.(*pglogrepl.StreamAbortMessageV2); a.Xid != pa.Xid || a.Subxid != pa.SubXid {
		t.Errorf("stream abort %+v, pglogrepl %+v", a, pa)
	}
	for _, b := range [][]byte{start, commit, abort} {
		for n := 1; n < len(b); n++ {
			var err error
			switch b[0] {
			case TypeStreamStart:
				_, err = DecodeStreamStart(b[:n])
			case TypeStreamCommit:
				_, err = DecodeStreamCommit(b[:n])
			default:
				_, err = DecodeStreamAbort(b[:n])
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%q truncated to %d bytes: %v, want ErrMalformed", b[0], n, err)
			}
		}
	}

	// A streamed insert: the xid after the type byte; without it, the
	// protocol 1 message.
	ins := []byte{TypeInsert}
	ins = be.AppendUint32(ins, 7003)
	ins = be.AppendUint32(ins, 16384)
	ins = append(ins, 'N', 0, 1, 't', 0, 0, 0, 1, 'x')
	xid, ok, err := StreamedXid(ins)
	if err != nil || !ok || xid != 7003 {
		t.Fatalf("StreamedXid = %d, %v, %v; want 7003", xid, ok, err)
	}
	var ch Change
	if err := DecodeChange(append([]byte{ins[0]}, ins[5:]...), &ch); err != nil || ch.Relation != 16384 || string(ch.New.Values[0]) != "x" {
		t.Fatalf("the insert without its xid: %+v, %v", ch, err)
	}
	if m, err = pglogrepl.ParseV2(ins, true); err != nil || m.(*pglogrepl.InsertMessageV2).Xid != 7003 {
		t.Fatalf("pglogrepl reads %+v, %v", m, err)
	}
	if _, ok, _ := StreamedXid([]byte{TypeStreamStop}); ok {
		t.Error("Stream Stop carries no xid")
	}
	if _, _, err := StreamedXid([]byte{TypeInsert, 0, 0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a streamed insert without its xid: %v, want ErrMalformed", err)
	}
}
