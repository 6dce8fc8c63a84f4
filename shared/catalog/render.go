package catalog

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
)

// layout is where each source column sits in a resolution row (see
// resolution: destination, the key columns, _sluice_c<i> per non-key
// column, the seven system columns when asked, then _sluice_n<i> per
// non-key array column),
// with each column's JSON key rendered once per page.
type layout struct {
	cols   []Column
	at     []int    // value index per column
	null   []int    // NULL-marker index per column, -1 for none
	keys   [][]byte // `"name":` per column
	system int      // index of the first system column, -1 when not asked
	// quiet leaves the system columns out of the JSON (a row that has them,
	// for its position, rendered as Read renders it without them).
	quiet bool
}

func newLayout(ti TableInfo, system bool) *layout {
	nk := len(ti.PrimaryKey)
	l := &layout{cols: ti.Columns, system: -1}
	next := 1 + nk
	var arrays []int
	for ci, col := range ti.Columns {
		l.keys = append(l.keys, appendKey(nil, col.Name))
		l.null = append(l.null, -1)
		if ki := slices.Index(ti.PrimaryKey, col.Name); ki >= 0 {
			l.at = append(l.at, 1+ki)
			continue
		}
		l.at = append(l.at, next)
		next++
		if _, isArray := col.Kind.Elem(); isArray {
			arrays = append(arrays, ci)
		}
	}
	if system {
		l.system = next
		next += 7
	}
	for _, ci := range arrays {
		l.null[ci] = next
		next++
	}
	return l
}

// keyLayout is the layout of ti's primary key alone: it renders a
// resolution row's key columns (at 1.., after the destination) as a JSON
// object.
func keyLayout(ti TableInfo) *layout {
	k := ti
	k.Columns = nil
	for _, col := range ti.Columns {
		if ti.isKey(col.Name) {
			k.Columns = append(k.Columns, col)
		}
	}
	return newLayout(k, false)
}

// render renders one resolution row as the source row's to_jsonb.
func (l *layout) render(r []any) (json.RawMessage, error) {
	b := make([]byte, 0, 256)
	b = append(b, '{')
	var err error
	for ci, col := range l.cols {
		v := r[l.at[ci]]
		if at := l.null[ci]; at >= 0 && at < len(r) && asBool(r[at]) {
			v = nil
		}
		if ci > 0 {
			b = append(b, ',')
		}
		b = append(b, l.keys[ci]...)
		if b, err = pgtypes.AppendJSON(b, col.Kind, v); err != nil {
			return nil, fmt.Errorf("column %s: %w", col.Name, err)
		}
	}
	if l.system >= 0 && !l.quiet {
		// resolvedSystem: op, unchanged, lsn, seq, commit time, store, pack
		s := r[l.system:]
		b = append(b, ',')
		b = appendKey(b, proto.ColLSN)
		b = strconv.AppendQuote(b, proto.LSN(asUint(s[2])).String())
		b = append(b, ',')
		b = appendKey(b, proto.ColSeq)
		b = strconv.AppendUint(b, asUint(s[3]), 10)
		b = append(b, ',')
		b = appendKey(b, proto.ColOp)
		b = strconv.AppendInt(b, asInt(s[0]), 10)
		b = append(b, ',')
		b = appendKey(b, proto.ColCommitTime)
		if b, err = pgtypes.AppendJSON(b, proto.KindTimestampTZ, s[4]); err != nil {
			return nil, fmt.Errorf("column %s: %w", proto.ColCommitTime, err)
		}
		b = append(b, ',')
		b = appendKey(b, "_sluice_store_id")
		b = strconv.AppendQuote(b, asString(s[5]))
		b = append(b, ',')
		b = appendKey(b, "_sluice_pack_id")
		b = strconv.AppendQuote(b, asString(s[6]))
	}
	b = append(b, '}')
	return b, nil
}

func appendKey(b []byte, k string) []byte {
	kb, _ := json.Marshal(k)
	b = append(b, kb...)
	return append(b, ':')
}

// ---- keyset cursors ----

type cursor struct {
	Key []any `json:"k"`
}

func encodeCursor(key []any) string {
	b, _ := json.Marshal(cursor{Key: key})
	return base64.RawURLEncoding.EncodeToString(b)
}

// cursorPredicate turns a cursor into "(key...) <op> (values...)".
func cursorPredicate(ti TableInfo, s, op string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var cur cursor
	if err := dec.Decode(&cur); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	if len(cur.Key) != len(ti.PrimaryKey) {
		return "", fmt.Errorf("%w: %d key values for a %d-column primary key", ErrBadCursor, len(cur.Key), len(ti.PrimaryKey))
	}
	cols := make([]string, len(ti.PrimaryKey))
	vals := make([]string, len(ti.PrimaryKey))
	for i, k := range ti.PrimaryKey {
		col, _ := ti.Column(k)
		lit, err := literal(col.Kind, cur.Key[i])
		if err != nil {
			return "", fmt.Errorf("%w: column %s: %v", ErrBadCursor, k, err)
		}
		cols[i] = ident(k)
		vals[i] = lit
	}
	return "(" + strings.Join(cols, ", ") + ") " + op + " (" + strings.Join(vals, ", ") + ")", nil
}

// literal renders a cursor value as an SQL literal of the key column's
// storage type.
func literal(k proto.Kind, v any) (string, error) {
	switch chScalar(k) {
	case "Int16", "Int32", "Int64":
		n, ok := v.(json.Number)
		if !ok {
			return "", fmt.Errorf("want an integer, got %T", v)
		}
		x, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return "", err
		}
		return "toInt64(" + strconv.FormatInt(x, 10) + ")", nil
	case "Float32", "Float64":
		switch x := v.(type) {
		case json.Number:
			f, err := strconv.ParseFloat(string(x), 64)
			if err != nil {
				return "", err
			}
			return "toFloat64(" + strconv.FormatFloat(f, 'g', -1, 64) + ")", nil
		case string: // NaN, Inf
			f, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return "", err
			}
			return "toFloat64(" + quote(strconv.FormatFloat(f, 'g', -1, 64)) + ")", nil
		}
		return "", fmt.Errorf("want a number, got %T", v)
	case "Bool":
		b, ok := v.(bool)
		if !ok {
			return "", fmt.Errorf("want a boolean, got %T", v)
		}
		return strconv.FormatBool(b), nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T", v)
	}
	return quote(s), nil
}

// asBool reads a normalized boolean (Bool or a UInt8 0/1).
func asBool(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case int64:
		return x != 0
	case uint64:
		return x != 0
	}
	return false
}
