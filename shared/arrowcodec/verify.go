package arrowcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxMetadataSize bounds one IPC message's flatbuffer metadata (a schema of
// a 1,600-column table is a few hundred KB).
const MaxMetadataSize = 4 << 20

// verifyStream walks the IPC stream framing and checks every message's
// flatbuffer metadata before arrow reads it: every table, vector and string
// it reaches must lie inside the metadata buffer. arrow-go trusts vector
// lengths and sizes slices from them (make([]Field, n)), so a corrupt
// length would otherwise abort the process with an out-of-memory fatal
// error that recover cannot catch (found by FuzzDecode).
func verifyStream(body []byte) error {
	pos := 0
	for msgs := 0; ; msgs++ {
		if pos == len(body) {
			return nil // end of stream without the end marker: arrow accepts it
		}
		if pos+4 > len(body) {
			return errors.New("truncated message length")
		}
		n := int32(binary.LittleEndian.Uint32(body[pos:]))
		pos += 4
		if n == -1 { // continuation marker, then the length
			if pos+4 > len(body) {
				return errors.New("truncated message length")
			}
			n = int32(binary.LittleEndian.Uint32(body[pos:]))
			pos += 4
		}
		if n == 0 {
			return nil // end-of-stream marker
		}
		if n < 0 || n > MaxMetadataSize || pos+int(n) > len(body) {
			return fmt.Errorf("message %d: metadata length %d out of bounds", msgs, n)
		}
		bodyLen, err := verifyMessage(body[pos : pos+int(n)])
		if err != nil {
			return fmt.Errorf("message %d: %w", msgs, err)
		}
		pos += int(n)
		if bodyLen < 0 || bodyLen > int64(len(body)-pos) {
			return fmt.Errorf("message %d: body length %d out of bounds", msgs, bodyLen)
		}
		pos += int(bodyLen)
	}
}

var errBounds = errors.New("flatbuffer offset out of bounds")

type fbTable struct {
	b       []byte
	pos, vt int
	vtLen   int
}

func u32(b []byte, p int) (int, error) {
	if p < 0 || p+4 > len(b) {
		return 0, errBounds
	}
	return int(binary.LittleEndian.Uint32(b[p:])), nil
}

func tableAt(b []byte, pos int) (fbTable, error) {
	if pos < 0 || pos+4 > len(b) {
		return fbTable{}, errBounds
	}
	soff := int(int32(binary.LittleEndian.Uint32(b[pos:])))
	vt := pos - soff
	if vt < 0 || vt+4 > len(b) {
		return fbTable{}, errBounds
	}
	vtLen := int(binary.LittleEndian.Uint16(b[vt:]))
	tLen := int(binary.LittleEndian.Uint16(b[vt+2:]))
	if vtLen < 4 || vtLen%2 != 0 || vt+vtLen > len(b) || pos+tLen > len(b) {
		return fbTable{}, errBounds
	}
	return fbTable{b: b, pos: pos, vt: vt, vtLen: vtLen}, nil
}

// field returns the absolute position of the field at vtable offset o, or 0
// when absent.
func (t fbTable) field(o int) int {
	if o >= t.vtLen {
		return 0
	}
	off := int(binary.LittleEndian.Uint16(t.b[t.vt+o:]))
	if off == 0 {
		return 0
	}
	return t.pos + off
}

func (t fbTable) u8(o int) (byte, error) {
	p := t.field(o)
	if p == 0 {
		return 0, nil
	}
	if p >= len(t.b) {
		return 0, errBounds
	}
	return t.b[p], nil
}

func (t fbTable) i64(o int) (int64, error) {
	p := t.field(o)
	if p == 0 {
		return 0, nil
	}
	if p+8 > len(t.b) {
		return 0, errBounds
	}
	return int64(binary.LittleEndian.Uint64(t.b[p:])), nil
}

// sub returns the table referenced by the field at o; ok is false when absent.
func (t fbTable) sub(o int) (fbTable, bool, error) {
	p := t.field(o)
	if p == 0 {
		return fbTable{}, false, nil
	}
	rel, err := u32(t.b, p)
	if err != nil {
		return fbTable{}, false, err
	}
	s, err := tableAt(t.b, p+rel)
	return s, err == nil, err
}

// vector checks the vector (or string) at o with elements of elem bytes and
// returns its element start and length.
func (t fbTable) vector(o, elem int) (start, n int, err error) {
	p := t.field(o)
	if p == 0 {
		return 0, 0, nil
	}
	rel, err := u32(t.b, p)
	if err != nil {
		return 0, 0, err
	}
	vp := p + rel
	n, err = u32(t.b, vp)
	if err != nil {
		return 0, 0, err
	}
	start = vp + 4
	if n > (len(t.b)-start)/max(elem, 1) || start > len(t.b) {
		return 0, 0, fmt.Errorf("%w: vector of %d elements", errBounds, n)
	}
	return start, n, nil
}

// tables checks a vector of tables at o and calls fn on each.
func (t fbTable) tables(o int, fn func(fbTable) error) error {
	start, n, err := t.vector(o, 4)
	if err != nil {
		return err
	}
	for i := range n {
		p := start + 4*i
		rel, err := u32(t.b, p)
		if err != nil {
			return err
		}
		e, err := tableAt(t.b, p+rel)
		if err != nil {
			return err
		}
		if fn != nil {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Arrow Message.fbs / Schema.fbs vtable offsets.
const (
	msgHeaderType = 6
	msgHeader     = 8
	msgBodyLength = 10
	msgCustomMeta = 12

	hdrSchema          = 1
	hdrDictionaryBatch = 2
	hdrRecordBatch     = 3

	schemaFields     = 6
	schemaCustomMeta = 8
	schemaFeatures   = 10

	fieldName       = 4
	fieldTypeType   = 8
	fieldType       = 10
	fieldDictionary = 12
	fieldChildren   = 14
	fieldCustomMeta = 16

	kvKey   = 4
	kvValue = 6

	rbNodes    = 6
	rbBuffers  = 8
	rbCompress = 10
	rbVariadic = 12

	dbData = 6

	typeTimestamp = 10 // Timestamp.timezone at 6
	typeUnion     = 14 // Union.typeIds at 6

	maxFieldDepth = 64
)

func verifyMessage(b []byte) (bodyLen int64, err error) {
	root, err := u32(b, 0)
	if err != nil {
		return 0, err
	}
	m, err := tableAt(b, root)
	if err != nil {
		return 0, err
	}
	if err := m.tables(msgCustomMeta, verifyKV); err != nil {
		return 0, err
	}
	if bodyLen, err = m.i64(msgBodyLength); err != nil {
		return 0, err
	}
	ht, err := m.u8(msgHeaderType)
	if err != nil {
		return 0, err
	}
	h, ok, err := m.sub(msgHeader)
	if err != nil || !ok {
		return 0, errors.Join(errors.New("message without a header"), err)
	}
	switch ht {
	case hdrSchema:
		err = verifySchema(h)
	case hdrRecordBatch:
		err = verifyRecordBatch(h)
	case hdrDictionaryBatch:
		var d fbTable
		if d, ok, err = h.sub(dbData); err == nil && ok {
			err = verifyRecordBatch(d)
		}
	default:
		err = fmt.Errorf("unexpected message header type %d", ht)
	}
	return bodyLen, err
}

func verifyKV(kv fbTable) error {
	if _, _, err := kv.vector(kvKey, 1); err != nil {
		return err
	}
	_, _, err := kv.vector(kvValue, 1)
	return err
}

func verifySchema(s fbTable) error {
	if err := s.tables(schemaCustomMeta, verifyKV); err != nil {
		return err
	}
	if _, _, err := s.vector(schemaFeatures, 8); err != nil {
		return err
	}
	return s.tables(schemaFields, func(f fbTable) error { return verifyField(f, 0) })
}

func verifyField(f fbTable, depth int) error {
	if depth > maxFieldDepth {
		return errors.New("fields nested too deeply")
	}
	if _, _, err := f.vector(fieldName, 1); err != nil {
		return err
	}
	if err := f.tables(fieldCustomMeta, verifyKV); err != nil {
		return err
	}
	tt, err := f.u8(fieldTypeType)
	if err != nil {
		return err
	}
	typ, ok, err := f.sub(fieldType)
	if err != nil {
		return err
	}
	if ok {
		switch tt {
		case typeTimestamp:
			_, _, err = typ.vector(6, 1)
		case typeUnion:
			_, _, err = typ.vector(6, 4)
		}
		if err != nil {
			return err
		}
	}
	if _, _, err := f.sub(fieldDictionary); err != nil {
		return err
	}
	return f.tables(fieldChildren, func(c fbTable) error { return verifyField(c, depth+1) })
}

func verifyRecordBatch(rb fbTable) error {
	if _, _, err := rb.vector(rbNodes, 16); err != nil {
		return err
	}
	if _, _, err := rb.vector(rbBuffers, 16); err != nil {
		return err
	}
	if _, _, err := rb.sub(rbCompress); err != nil {
		return err
	}
	_, _, err := rb.vector(rbVariadic, 8)
	return err
}
