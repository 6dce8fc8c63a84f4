package pgoutput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// sameTime compares commit times where pglogrepl's nanosecond arithmetic
// does not overflow (it does beyond ±292 years of 1970).
func sameTime(a, b time.Time) bool {
	if a.Year() < 1800 || a.Year() > 2200 {
		return true
	}
	return a.Equal(b)
}

type enc struct{ b []byte }

func (e *enc) u8(v byte) *enc    { e.b = append(e.b, v); return e }
func (e *enc) u16(v uint16) *enc { e.b = binary.BigEndian.AppendUint16(e.b, v); return e }
func (e *enc) u32(v uint32) *enc { e.b = binary.BigEndian.AppendUint32(e.b, v); return e }
func (e *enc) u64(v uint64) *enc { e.b = binary.BigEndian.AppendUint64(e.b, v); return e }
func (e *enc) str(s string) *enc { e.b = append(append(e.b, s...), 0); return e }
func (e *enc) tuple(vals ...any) *enc {
	e.u16(uint16(len(vals)))
	for _, v := range vals {
		switch v := v.(type) {
		case nil:
			e.u8('n')
		case byte:
			e.u8(v) // 'u'
		case string:
			e.u8('t').u32(uint32(len(v)))
			e.b = append(e.b, v...)
		}
	}
	return e
}

func samples() map[string][]byte {
	ts := uint64(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC).UnixMicro() - pgEpochMicros)
	return map[string][]byte{
		"begin":    (&enc{}).u8('B').u64(0x16B3748).u64(ts).u32(77).b,
		"commit":   (&enc{}).u8('C').u8(0).u64(0x16B3748).u64(0x16B3780).u64(ts).b,
		"relation": (&enc{}).u8('R').u32(16384).str("public").str("items").u8('d').u16(2).u8(1).str("id").u32(20).u32(0xffffffff).u8(0).str("v").u32(25).u32(0xffffffff).b,
		"insert":   (&enc{}).u8('I').u32(16384).u8('N').tuple("1", "hello").b,
		"update":   (&enc{}).u8('U').u32(16384).u8('K').tuple("1", nil).u8('N').tuple("2", byte('u')).b,
		"update0":  (&enc{}).u8('U').u32(16384).u8('N').tuple("2", "x").b,
		"delete":   (&enc{}).u8('D').u32(16384).u8('O').tuple("2", "").b,
		"truncate": (&enc{}).u8('T').u32(2).u8(1).u32(16384).u32(16385).b,
	}
}

// TestAgainstPglogrepl decodes the same messages with pglogrepl.
func TestAgainstPglogrepl(t *testing.T) {
	for name, b := range samples() {
		t.Run(name, func(t *testing.T) { compare(t, b) })
	}
}

func tupleEq(t *testing.T, mine *Tuple, theirs *pglogrepl.TupleData) {
	t.Helper()
	if theirs == nil {
		if mine.Len() != 0 {
			t.Fatalf("tuple: mine has %d columns, pglogrepl none", mine.Len())
		}
		return
	}
	if mine.Len() != len(theirs.Columns) {
		t.Fatalf("tuple: %d vs %d columns", mine.Len(), len(theirs.Columns))
	}
	for i, c := range theirs.Columns {
		if mine.Kinds[i] != c.DataType || !bytes.Equal(mine.Values[i], c.Data) {
			t.Fatalf("column %d: %c %q vs %c %q", i, mine.Kinds[i], mine.Values[i], c.DataType, c.Data)
		}
	}
}

// strict reports whether pglogrepl accepted a tuple value kind pgoutput
// never sends (it is lenient; we refuse such messages).
func strict(ts ...*pglogrepl.TupleData) bool {
	for _, t := range ts {
		if t == nil {
			continue
		}
		for _, c := range t.Columns {
			switch c.DataType {
			case 'n', 'u', 't', 'b':
			default:
				return true
			}
		}
	}
	return false
}

// compare checks that b decodes to the same thing with both decoders; when
// pglogrepl refuses or panics on it, only that ours does not panic.
func compare(t *testing.T, b []byte) {
	var theirs pglogrepl.Message
	if len(b) >= 5 && b[0] == 'T' && int(binary.BigEndian.Uint32(b[1:]))*4 > len(b) {
		// pglogrepl allocates the declared relation count up front: a
		// fuzzed count runs it out of memory. Ours only must not panic.
		_, _ = DecodeTruncate(b)
		return
	}
	func() {
		defer func() { _ = recover() }()
		theirs, _ = pglogrepl.Parse(b)
	}()
	if len(b) == 0 {
		return
	}
	switch m := theirs.(type) {
	case *pglogrepl.BeginMessage:
		mine, err := DecodeBegin(b)
		if err != nil || uint64(m.FinalLSN) != mine.FinalLSN || !sameTime(mine.CommitTime, m.CommitTime) || m.Xid != mine.Xid {
			t.Fatalf("begin: %+v %v vs %+v", mine, err, m)
		}
	case *pglogrepl.CommitMessage:
		mine, err := DecodeCommit(b)
		if err != nil || uint64(m.CommitLSN) != mine.CommitLSN || uint64(m.TransactionEndLSN) != mine.EndLSN || !sameTime(mine.CommitTime, m.CommitTime) {
			t.Fatalf("commit: %+v %v vs %+v", mine, err, m)
		}
	case *pglogrepl.RelationMessage:
		mine, err := DecodeRelation(b)
		if err != nil || mine.ID != m.RelationID || mine.Namespace != m.Namespace || mine.Name != m.RelationName || mine.Identity != m.ReplicaIdentity || len(mine.Columns) != len(m.Columns) {
			t.Fatalf("relation: %+v %v vs %+v", mine, err, m)
		}
		for i, c := range m.Columns {
			mc := mine.Columns[i]
			if mc.Name != c.Name || mc.TypeOID != c.DataType || mc.TypMod != c.TypeModifier || mc.Key != (c.Flags&1 == 1) {
				t.Fatalf("relation column %d: %+v vs %+v", i, mc, c)
			}
		}
	case *pglogrepl.InsertMessage:
		if strict(m.Tuple) {
			return
		}
		var c Change
		if err := DecodeChange(b, &c); errors.Is(err, ErrMalformed) {
			return // stricter than pglogrepl: fine
		} else if err != nil || c.Relation != m.RelationID {
			t.Fatalf("insert: %v", err)
		}
		tupleEq(t, &c.New, m.Tuple)
	case *pglogrepl.UpdateMessage:
		if strict(m.OldTuple, m.NewTuple) {
			return
		}
		var c Change
		if err := DecodeChange(b, &c); errors.Is(err, ErrMalformed) {
			return // stricter than pglogrepl: fine
		} else if err != nil || c.Relation != m.RelationID || c.OldKind != m.OldTupleType {
			t.Fatalf("update: %v %c vs %c", err, c.OldKind, m.OldTupleType)
		}
		tupleEq(t, &c.Old, m.OldTuple)
		tupleEq(t, &c.New, m.NewTuple)
	case *pglogrepl.DeleteMessage:
		if strict(m.OldTuple) {
			return
		}
		var c Change
		if err := DecodeChange(b, &c); errors.Is(err, ErrMalformed) {
			return // stricter than pglogrepl: fine
		} else if err != nil || c.Relation != m.RelationID || c.OldKind != m.OldTupleType {
			t.Fatalf("delete: %v", err)
		}
		tupleEq(t, &c.Old, m.OldTuple)
	case *pglogrepl.TruncateMessage:
		mine, err := DecodeTruncate(b)
		if err != nil || len(mine.Relations) != len(m.RelationIDs) || mine.Options != m.Option {
			t.Fatalf("truncate: %+v %v vs %+v", mine, err, m)
		}
	default:
		// pglogrepl refused or panicked: ours must return an error or a value, never panic.
		var c Change
		_, _ = DecodeBegin(b)
		_, _ = DecodeCommit(b)
		_, _ = DecodeRelation(b)
		_ = DecodeChange(b, &c)
		_, _ = DecodeTruncate(b)
	}
}

func TestTruncatedInputs(t *testing.T) {
	for name, b := range samples() {
		for i := 1; i < len(b); i++ {
			var c Change
			var err error
			switch b[0] {
			case 'B':
				_, err = DecodeBegin(b[:i])
			case 'C':
				_, err = DecodeCommit(b[:i])
			case 'R':
				_, err = DecodeRelation(b[:i])
			case 'T':
				_, err = DecodeTruncate(b[:i])
			default:
				err = DecodeChange(b[:i], &c)
			}
			if err == nil && b[0] != 'T' {
				t.Errorf("%s cut at %d of %d decoded without error", name, i, len(b))
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: error %v does not wrap ErrMalformed", name, err)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, b := range samples() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { compare(t, b) })
}

func BenchmarkDecodeInsert(b *testing.B) {
	msg := (&enc{}).u8('I').u32(1).u8('N').tuple("12345", "tenant_0042", "some text value of moderate length", "3.14159", nil, "2024-01-02 03:04:05+00").b
	var c Change
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		_ = DecodeChange(msg, &c)
	}
}

func BenchmarkPglogreplInsert(b *testing.B) {
	msg := (&enc{}).u8('I').u32(1).u8('N').tuple("12345", "tenant_0042", "some text value of moderate length", "3.14159", nil, "2024-01-02 03:04:05+00").b
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		_, _ = pglogrepl.Parse(msg)
	}
}

func TestDecodeMessage(t *testing.T) {
	b := (&enc{}).u8(TypeMessage).u8(0).u64(0x16B3748).str("sluice.resync").u32(3).b
	b = append(b, "abc"...)
	m, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Transactional || m.LSN != 0x16B3748 || m.Prefix != "sluice.resync" || string(m.Content) != "abc" {
		t.Fatalf("decoded %+v", m)
	}
	// pglogrepl (v1 format) reads the same fields.
	pm, err := pglogrepl.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	lm, ok := pm.(*pglogrepl.LogicalDecodingMessage)
	if !ok || uint64(lm.LSN) != m.LSN || lm.Prefix != m.Prefix || !bytes.Equal(lm.Content, m.Content) {
		t.Fatalf("pglogrepl read %#v", pm)
	}
	for n := 1; n < len(b); n++ {
		if _, err := DecodeMessage(b[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
}
