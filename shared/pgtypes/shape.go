package pgtypes

import (
	"encoding/json"
	"fmt"
)

// A Shape says how a value's Postgres text form becomes the JSON that
// to_jsonb gives for it. It is what a proto.KindToJSONB column carries: the
// reader resolves the shape of the column's type from the source catalog
// (ResolveShape) and converts every value with AppendJSON before it enters
// the Arrow batch. A Shape is immutable and safe for concurrent use.
//
// The forms follow to_jsonb's categories (jsonb_categorize_type), domains
// seen through: numbers, booleans, json/jsonb embedded, date, timestamp
// and timestamptz in ISO 8601 form, arrays (any dimensions, bounds
// dropped), composites as objects, hstore as an object of strings, and
// every other type as a string of its text form.
type Shape struct {
	form  form
	elem  *Shape // formArray, formVector
	delim byte   // formArray: the element type's typdelim
	names []string
	attrs []*Shape // formComposite: the attributes, in order
}

type form uint8

const (
	formString form = iota
	formNumber
	formBool
	formTimestamp
	formTimestampTZ
	formJSON
	formArray
	formVector // int2vector, oidvector: space-separated elements
	formComposite
	formHstore
)

// maxShapeDepth bounds the nesting a conversion walks (arrays within
// composites within arrays ...), so hostile text cannot exhaust the stack.
const maxShapeDepth = 64

// AppendJSON appends the JSON to_jsonb gives for the value whose text
// output form (with the reader's session settings) is text. Errors wrap
// ErrSyntax; dst is returned unchanged on error.
func (s *Shape) AppendJSON(dst, text []byte) ([]byte, error) {
	out, err := s.appendValue(dst, text, 0)
	if err == nil {
		return out, nil
	}
	return dst, fmt.Errorf("converting %q to JSON: %w", clip(text), err)
}

// appendValue converts one value's text (already unquoted).
func (s *Shape) appendValue(dst, t []byte, depth int) ([]byte, error) {
	if depth > maxShapeDepth {
		return dst, fmt.Errorf("nested deeper than %d: %w", maxShapeDepth, ErrSyntax)
	}
	switch s.form {
	case formNumber:
		return appendNumberText(dst, t), nil
	case formBool:
		b, err := parseBool(t)
		if err != nil {
			return dst, err
		}
		if b {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case formTimestamp, formTimestampTZ:
		return appendTimestampText(dst, t, s.form == formTimestampTZ)
	case formJSON:
		if !json.Valid(t) {
			return dst, fmt.Errorf("json value %q: %w", clip(t), ErrSyntax)
		}
		return append(dst, t...), nil
	case formArray:
		p := &textParser{t: t}
		return s.appendArrayText(dst, p, depth)
	case formVector:
		return s.appendVectorText(dst, t, depth)
	case formComposite:
		p := &textParser{t: t}
		return s.appendRecordText(dst, p, depth)
	case formHstore:
		return appendHstoreText(dst, t)
	}
	return appendString(dst, t), nil
}

// textParser walks array and record literals.
type textParser struct {
	t []byte
	i int
}

func (p *textParser) skipSpace() {
	for p.i < len(p.t) && isArraySpace(p.t[p.i]) {
		p.i++
	}
}

func (p *textParser) fail(what string) error {
	return fmt.Errorf("%s at byte %d: %w", what, p.i, ErrSyntax)
}

// appendArrayText converts array_out's form: optional "[lb:ub]..=" bounds
// (dropped, as to_jsonb drops them), nested braces, elements split by the
// element type's delimiter, double quotes with backslash escapes, unquoted
// NULL. "{}" is [] at any declared dimension.
func (s *Shape) appendArrayText(dst []byte, p *textParser, depth int) ([]byte, error) {
	start := len(dst)
	p.skipSpace()
	if p.i < len(p.t) && p.t[p.i] == '[' {
		for p.i < len(p.t) && p.t[p.i] != '=' {
			p.i++
		}
		if p.i == len(p.t) {
			return dst, p.fail("array bounds without '='")
		}
		p.i++
		p.skipSpace()
	}
	dst, err := s.appendArrayLevel(dst, p, depth)
	if err != nil {
		return dst[:start], err
	}
	p.skipSpace()
	if p.i != len(p.t) {
		return dst[:start], p.fail("text after the array")
	}
	return dst, nil
}

func (s *Shape) appendArrayLevel(dst []byte, p *textParser, depth int) ([]byte, error) {
	if depth > maxShapeDepth {
		return dst, p.fail("array nested too deep")
	}
	if p.i == len(p.t) || p.t[p.i] != '{' {
		return dst, p.fail("expected '{'")
	}
	p.i++
	dst = append(dst, '[')
	p.skipSpace()
	if p.i < len(p.t) && p.t[p.i] == '}' {
		p.i++
		return append(dst, ']'), nil
	}
	sub := -1 // whether this level holds sub-arrays (1) or elements (0)
	var buf []byte
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		p.skipSpace()
		if p.i == len(p.t) {
			return dst, p.fail("unterminated array")
		}
		isSub := p.t[p.i] == '{'
		if sub >= 0 && (sub == 1) != isSub {
			return dst, p.fail("array mixes elements and sub-arrays")
		}
		if isSub {
			sub = 1
			var err error
			if dst, err = s.appendArrayLevel(dst, p, depth+1); err != nil {
				return dst, err
			}
		} else {
			sub = 0
			val, null, err := p.arrayElement(buf[:0], s.delim)
			if err != nil {
				return dst, err
			}
			buf = val
			if null {
				dst = append(dst, "null"...)
			} else if dst, err = s.elem.appendValue(dst, val, depth+1); err != nil {
				return dst, err
			}
		}
		p.skipSpace()
		if p.i == len(p.t) {
			return dst, p.fail("unterminated array")
		}
		switch p.t[p.i] {
		case s.delim:
			p.i++
			continue
		case '}':
			p.i++
			return append(dst, ']'), nil
		}
		return dst, p.fail("expected a delimiter or '}'")
	}
}

// arrayElement reads one element, unescaped into buf; null reports an
// unquoted NULL.
func (p *textParser) arrayElement(buf []byte, delim byte) (val []byte, null bool, err error) {
	if p.t[p.i] == '"' {
		p.i++
		for {
			if p.i == len(p.t) {
				return nil, false, p.fail("unterminated quoted element")
			}
			c := p.t[p.i]
			p.i++
			switch c {
			case '"':
				return buf, false, nil
			case '\\':
				if p.i == len(p.t) {
					return nil, false, p.fail("escape at end")
				}
				c = p.t[p.i]
				p.i++
			}
			buf = append(buf, c)
		}
	}
	sig, escaped := 0, false // length up to the last character that is not trailing space
	for p.i < len(p.t) {
		c := p.t[p.i]
		if c == delim || c == '}' {
			break
		}
		if c == '"' || c == '{' {
			return nil, false, p.fail("unexpected character in an element")
		}
		p.i++
		if c == '\\' {
			if p.i == len(p.t) {
				return nil, false, p.fail("escape at end")
			}
			buf = append(buf, p.t[p.i])
			p.i++
			sig, escaped = len(buf), true
			continue
		}
		buf = append(buf, c)
		if !isArraySpace(c) {
			sig = len(buf)
		}
	}
	buf = buf[:sig]
	if len(buf) == 0 {
		return nil, false, p.fail("empty element")
	}
	if !escaped && len(buf) == 4 && isNULL(buf) {
		return nil, true, nil
	}
	return buf, false, nil
}

// appendVectorText converts int2vector/oidvector text ("1 2 3").
func (s *Shape) appendVectorText(dst, t []byte, depth int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, '[')
	n := 0
	for i := 0; i < len(t); {
		for i < len(t) && t[i] == ' ' {
			i++
		}
		j := i
		for j < len(t) && t[j] != ' ' {
			j++
		}
		if j == i {
			break
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = s.elem.appendValue(dst, t[i:j], depth+1); err != nil {
			return dst[:start], err
		}
		n++
		i = j
	}
	return append(dst, ']'), nil
}

// appendRecordText converts record_out's form "(a,b,...)": an empty field
// is NULL, a quoted one may hold "" and backslash escapes, dropped
// attributes are not written. The field count must match the type's.
func (s *Shape) appendRecordText(dst []byte, p *textParser, depth int) ([]byte, error) {
	start := len(dst)
	p.skipSpace()
	if p.i == len(p.t) || p.t[p.i] != '(' {
		return dst, p.fail("expected '('")
	}
	p.i++
	dst = append(dst, '{')
	if len(s.attrs) == 0 {
		// A type without attributes prints "()".
		if p.i == len(p.t) || p.t[p.i] != ')' {
			return dst[:start], p.fail("record of a type without attributes")
		}
		p.i++
		p.skipSpace()
		if p.i != len(p.t) {
			return dst[:start], p.fail("text after the record")
		}
		return append(dst, '}'), nil
	}
	var buf []byte
	for n := 0; ; n++ {
		if n >= len(s.attrs) {
			return dst[:start], p.fail(fmt.Sprintf("record has more fields than its type's %d", len(s.attrs)))
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, s.names[n])
		dst = append(dst, ':')
		val, null, err := p.recordField(buf[:0])
		if err != nil {
			return dst[:start], err
		}
		buf = val
		if null {
			dst = append(dst, "null"...)
		} else if dst, err = s.attrs[n].appendValue(dst, val, depth+1); err != nil {
			return dst[:start], err
		}
		if p.i == len(p.t) {
			return dst[:start], p.fail("unterminated record")
		}
		c := p.t[p.i]
		p.i++
		if c == ',' {
			continue
		}
		// c is ')': recordField stops only at ',' or ')'.
		if n+1 != len(s.attrs) {
			return dst[:start], p.fail(fmt.Sprintf("record has %d fields, its type %d", n+1, len(s.attrs)))
		}
		p.skipSpace()
		if p.i != len(p.t) {
			return dst[:start], p.fail("text after the record")
		}
		return append(dst, '}'), nil
	}
}

// recordField reads one field up to (not past) the ',' or ')' that ends
// it; null reports an empty field.
func (p *textParser) recordField(buf []byte) (val []byte, null bool, err error) {
	null = true
	inQuote := false
	for p.i < len(p.t) {
		c := p.t[p.i]
		if !inQuote && (c == ',' || c == ')') {
			return buf, null, nil
		}
		null = false
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.t) {
				return nil, false, p.fail("escape at end")
			}
			buf = append(buf, p.t[p.i])
			p.i++
		case c == '"' && !inQuote:
			inQuote = true
		case c == '"' && inQuote:
			if p.i < len(p.t) && p.t[p.i] == '"' {
				buf = append(buf, '"')
				p.i++
			} else {
				inQuote = false
			}
		default:
			buf = append(buf, c)
		}
	}
	return nil, false, p.fail("unterminated record")
}
