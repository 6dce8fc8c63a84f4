package pgtypes

import "fmt"

// Scalar conversions of a Shape: numbers, timestamps and hstore.

// appendNumberText writes a number's text as to_jsonb does: a JSON number
// becomes a numeric (no exponent, no negative zero, scale kept); NaN and
// ±Infinity stay strings.
func appendNumberText(dst, t []byte) []byte {
	if !isJSONNumber(t, true) {
		return appendString(dst, t)
	}
	return appendNumericIn(dst, t)
}

// appendNumericIn writes the JSON number t (valid) as numeric_out writes
// numeric_in(t): the exponent folded into the digits, the display scale
// max(0, fraction digits - exponent), leading zeros dropped, -0 as 0.
func appendNumericIn(dst, t []byte) []byte {
	neg := t[0] == '-'
	if neg {
		t = t[1:]
	}
	var digits []byte
	frac, exp, i := 0, 0, 0
	for ; i < len(t) && t[i] >= '0' && t[i] <= '9'; i++ {
		digits = append(digits, t[i])
	}
	if i < len(t) && t[i] == '.' {
		for i++; i < len(t) && t[i] >= '0' && t[i] <= '9'; i++ {
			digits = append(digits, t[i])
			frac++
		}
	}
	if i < len(t) {
		e := 0
		sign := 1
		i++
		if t[i] == '+' || t[i] == '-' {
			if t[i] == '-' {
				sign = -1
			}
			i++
		}
		for ; i < len(t); i++ {
			// Postgres prints no exponent beyond 3 digits; the cap only
			// bounds the zeros a hostile text could ask for.
			if e < 10_000 {
				e = e*10 + int(t[i]-'0')
			}
		}
		exp = sign * e
	}
	// value = digits × 10^q, shown with scale max(0, -q): appendPlain.
	q := exp - frac
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	zero := len(digits) == 1 && digits[0] == '0'
	if zero && q > 0 {
		q = 0
	}
	if neg && !zero {
		dst = append(dst, '-')
	}
	return appendPlain(dst, digits, q)
}

// appendTimestampText rewrites timestamp(tz)_out's ISO text ("2026-01-01
// 12:34:56.5+00", " BC" suffix, "infinity") as to_jsonb writes it:
// "2026-01-01T12:34:56.5+00:00". No range limit: the text is not read into
// an integer.
func appendTimestampText(dst, t []byte, tz bool) ([]byte, error) {
	switch string(t) {
	case "infinity", "-infinity":
		return appendString(dst, t), nil
	}
	sp := -1
	for i, c := range t {
		if c == ' ' {
			sp = i
			break
		}
	}
	if sp < 0 || len(t) < sp+9 {
		return dst, fmt.Errorf("timestamp %q: %w", clip(t), ErrSyntax)
	}
	rest := t[sp+1:]
	bc := false
	if n := len(rest); n > 3 && string(rest[n-3:]) == " BC" {
		bc, rest = true, rest[:n-3]
	}
	clock, off := rest, []byte(nil)
	if tz {
		k := len(rest) - 1
		for k > 0 && rest[k] != '+' && rest[k] != '-' {
			k--
		}
		if k <= 0 {
			return dst, fmt.Errorf("timestamptz %q has no offset: %w", clip(t), ErrSyntax)
		}
		clock, off = rest[:k], rest[k:]
	}
	if !matchDigits(t[:sp], "####-##-##") || !matchClock(clock) || tz && !matchOffset(off) {
		return dst, fmt.Errorf("timestamp %q: %w", clip(t), ErrSyntax)
	}
	dst = append(dst, '"')
	dst = append(dst, t[:sp]...)
	dst = append(dst, 'T')
	dst = append(dst, clock...)
	if tz {
		// ISO prints +HH[:MM[:SS]]; XSD (to_jsonb) always +HH:MM[:SS].
		dst = append(dst, off...)
		if len(off) == 3 {
			dst = append(dst, ":00"...)
		}
	}
	if bc {
		dst = append(dst, " BC"...)
	}
	return append(dst, '"'), nil
}

// matchDigits matches t against pat, where '#' is a digit and the first
// '#' run may be longer (years past 9999).
func matchDigits(t []byte, pat string) bool {
	extra := len(t) - len(pat)
	if extra < 0 {
		return false
	}
	j := 0
	for i := 0; i < len(pat); i++ {
		if pat[i] == '#' {
			if t[j] < '0' || t[j] > '9' {
				return false
			}
			j++
			if i == 0 {
				for ; extra > 0; extra-- {
					if t[j] < '0' || t[j] > '9' {
						return false
					}
					j++
				}
			}
			continue
		}
		if t[j] != pat[i] {
			return false
		}
		j++
	}
	return j == len(t)
}

// matchClock matches HH:MM:SS with an optional fraction of 1-6 digits.
func matchClock(c []byte) bool {
	if len(c) < 8 || !matchDigits(c[:8], "##:##:##") {
		return false
	}
	if len(c) == 8 {
		return true
	}
	f := c[8:]
	if f[0] != '.' || len(f) < 2 || len(f) > 7 {
		return false
	}
	for _, d := range f[1:] {
		if d < '0' || d > '9' {
			return false
		}
	}
	return true
}

// matchOffset matches +HH, +HH:MM or +HH:MM:SS (or -).
func matchOffset(o []byte) bool {
	if len(o) == 0 || o[0] != '+' && o[0] != '-' {
		return false
	}
	o = o[1:]
	switch len(o) {
	case 2:
		return matchDigits(o, "##")
	case 5:
		return matchDigits(o, "##:##")
	case 8:
		return matchDigits(o, "##:##:##")
	}
	return false
}

// appendHstoreText converts hstore_out's form (`"k"=>"v", "n"=>NULL`) as
// the hstore extension's cast to json does: an object of strings and nulls.
func appendHstoreText(dst, t []byte) ([]byte, error) {
	start := len(dst)
	p := &textParser{t: t}
	dst = append(dst, '{')
	var buf []byte
	for n := 0; ; n++ {
		p.skipSpace()
		if p.i == len(p.t) {
			if n > 0 {
				return dst[:start], p.fail("hstore ends after ','")
			}
			return append(dst, '}'), nil
		}
		key, null, err := p.hstoreToken(buf[:0])
		if err != nil || null {
			return dst[:start], p.fail("hstore key")
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, key)
		dst = append(dst, ':')
		p.skipSpace()
		if p.i+1 >= len(p.t) || p.t[p.i] != '=' || p.t[p.i+1] != '>' {
			return dst[:start], p.fail("expected '=>'")
		}
		p.i += 2
		p.skipSpace()
		val, null, err := p.hstoreToken(key[len(key):])
		if err != nil {
			return dst[:start], err
		}
		buf = key[:0]
		if null {
			dst = append(dst, "null"...)
		} else {
			dst = appendString(dst, val)
		}
		p.skipSpace()
		if p.i == len(p.t) {
			return append(dst, '}'), nil
		}
		if p.t[p.i] != ',' {
			return dst[:start], p.fail("expected ','")
		}
		p.i++
	}
}

// hstoreToken reads a quoted string (backslash escapes) or an unquoted word
// (NULL, case-insensitive, is null).
func (p *textParser) hstoreToken(buf []byte) ([]byte, bool, error) {
	if p.i < len(p.t) && p.t[p.i] == '"' {
		p.i++
		for {
			if p.i == len(p.t) {
				return nil, false, p.fail("unterminated hstore string")
			}
			c := p.t[p.i]
			p.i++
			if c == '"' {
				return buf, false, nil
			}
			if c == '\\' {
				if p.i == len(p.t) {
					return nil, false, p.fail("escape at end")
				}
				c = p.t[p.i]
				p.i++
			}
			buf = append(buf, c)
		}
	}
	s := p.i
	for p.i < len(p.t) && !isArraySpace(p.t[p.i]) && p.t[p.i] != ',' && p.t[p.i] != '=' {
		p.i++
	}
	w := p.t[s:p.i]
	if len(w) == 0 {
		return nil, false, p.fail("empty hstore token")
	}
	if len(w) == 4 && isNULL(w) {
		return nil, true, nil
	}
	return append(buf, w...), false, nil
}
