package pgtypes

import (
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/sluice-cdc/sluice/proto"
)

// validateArrayFirst makes appendArray parse every element before it
// appends anything, so a bad element leaves the builder untouched. Tests
// switch it off once to show the rule is needed.
var validateArrayFirst = true

// span is one element of an array literal: bytes [start, end) of the text,
// or of the scratch buffer when unescaped is set.
type span struct {
	start, end int
	null       bool
	unescaped  bool
}

// appendArray parses a one-dimensional array literal (array_out's form:
// optional "[lb:ub]=" bounds, braces, comma-separated elements, double quotes
// with backslash escapes, unquoted NULL) and appends it as one list value.
// It validates every element before appending anything.
func appendArray(lb *array.ListBuilder, elem proto.Kind, text []byte) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	elems, err := splitArray(text, sc)
	if err != nil {
		return err
	}
	var val []byte // scratch for one decoded bytea element
	var data int
	for _, e := range elems {
		if !validateArrayFirst {
			break
		}
		if e.null {
			continue
		}
		s, err := parseScalar(elem, sc.bytes(text, e), &val)
		if err != nil {
			return err
		}
		data += len(s.raw)
	}
	vb := lb.ValueBuilder()
	if err := checkData(vb, data); err != nil {
		return err
	}
	lb.Append(true)
	for _, e := range elems {
		if e.null {
			vb.AppendNull()
			continue
		}
		s, err := parseScalar(elem, sc.bytes(text, e), &val)
		if err != nil {
			return err // only reachable with validateArrayFirst off
		}
		put(vb, elem, s)
	}
	return nil
}

func (sc *scratch) bytes(text []byte, e span) []byte {
	if e.unescaped {
		return sc.buf[e.start:e.end]
	}
	return text[e.start:e.end]
}

func isArraySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// splitArray tokenizes a one-dimensional array literal into sc.elems.
func splitArray(t []byte, sc *scratch) ([]span, error) {
	sc.elems = sc.elems[:0]
	sc.buf = sc.buf[:0]
	i := 0
	skip := func() {
		for i < len(t) && isArraySpace(t[i]) {
			i++
		}
	}
	skip()
	if i < len(t) && t[i] == '[' {
		// Dimension decoration, written when a lower bound is not 1. The
		// bounds are dropped: the elements are what to_jsonb shows.
		dims := 0
		for i < len(t) && t[i] == '[' {
			for i < len(t) && t[i] != ']' {
				i++
			}
			if i == len(t) {
				return nil, ErrSyntax
			}
			i++
			dims++
		}
		if dims > 1 {
			return nil, ErrMultiDim
		}
		if i == len(t) || t[i] != '=' {
			return nil, ErrSyntax
		}
		i++
		skip()
	}
	if i == len(t) || t[i] != '{' {
		return nil, ErrSyntax
	}
	i++
	skip()
	if i < len(t) && t[i] == '}' {
		i++
		skip()
		if i != len(t) {
			return nil, ErrSyntax
		}
		return sc.elems, nil
	}
	for {
		skip()
		if i == len(t) {
			return nil, ErrSyntax
		}
		switch t[i] {
		case '{':
			return nil, ErrMultiDim
		case '"':
			i++
			start, esc := i, false
			bufStart := len(sc.buf)
			for {
				if i == len(t) {
					return nil, ErrSyntax
				}
				c := t[i]
				if c == '"' {
					break
				}
				if c == '\\' {
					if !esc {
						esc = true
						sc.buf = append(sc.buf, t[start:i]...)
					}
					i++
					if i == len(t) {
						return nil, ErrSyntax
					}
					c = t[i]
				}
				if esc {
					sc.buf = append(sc.buf, c)
				}
				i++
			}
			if esc {
				sc.elems = append(sc.elems, span{start: bufStart, end: len(sc.buf), unescaped: true})
			} else {
				sc.elems = append(sc.elems, span{start: start, end: i})
			}
			i++ // closing quote
		default:
			start, esc := i, false
			bufStart := len(sc.buf)
			lastSig := -1 // end of the last character that is not trailing space
			for i < len(t) && t[i] != ',' && t[i] != '}' {
				c := t[i]
				if c == '"' || c == '{' {
					return nil, ErrSyntax
				}
				if c == '\\' {
					if !esc {
						esc = true
						sc.buf = append(sc.buf, t[start:i]...)
					}
					i++
					if i == len(t) {
						return nil, ErrSyntax
					}
					sc.buf = append(sc.buf, t[i])
					i++
					lastSig = len(sc.buf)
					continue
				}
				if esc {
					sc.buf = append(sc.buf, c)
					if !isArraySpace(c) {
						lastSig = len(sc.buf)
					}
				} else if !isArraySpace(c) {
					lastSig = i + 1
				}
				i++
			}
			switch {
			case lastSig < 0:
				return nil, ErrSyntax // empty unquoted element
			case esc:
				sc.buf = sc.buf[:lastSig]
				sc.elems = append(sc.elems, span{start: bufStart, end: lastSig, unescaped: true})
			case lastSig-start == 4 && isNULL(t[start:lastSig]):
				sc.elems = append(sc.elems, span{null: true})
			default:
				sc.elems = append(sc.elems, span{start: start, end: lastSig})
			}
		}
		skip()
		if i == len(t) {
			return nil, ErrSyntax
		}
		if t[i] == ',' {
			i++
			continue
		}
		if t[i] != '}' {
			return nil, ErrSyntax
		}
		i++
		skip()
		if i != len(t) {
			return nil, ErrSyntax
		}
		return sc.elems, nil
	}
}

func isNULL(b []byte) bool {
	return (b[0]|0x20) == 'n' && (b[1]|0x20) == 'u' && (b[2]|0x20) == 'l' && (b[3]|0x20) == 'l'
}
