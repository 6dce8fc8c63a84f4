package pgtypes

import (
	"math"
	"math/big"
	"strconv"
)

// Postgres 12+ prints real and double precision (float4out, float8out with
// extra_float_digits >= 1) with Ryu's shortest digits, but it never accepts
// a bound of the rounding interval: a decimal exactly halfway between the
// value and its neighbour is not taken even when round-half-even parsing
// would map it back to the value. Go's strconv does take such a bound when
// the mantissa is even, so for those values it prints fewer digits than
// Postgres (1.801439850952911e+16 where Postgres prints
// 1.8014398509529112e+16, 3.355445e+07 for 3.3554448e+07).
//
// to_jsonb then reads float8out's text into a numeric, so it writes the
// same digits without an exponent (18014398509529112, 0.00015) and 0 for
// negative zero.

// floatDigits returns the digits Postgres prints for f (finite, not zero;
// bits 32 or 64) and the decimal exponent q of its last digit: |f| is
// printed as digits × 10^q. digits has no trailing zeros. buf is scratch.
func floatDigits(buf []byte, f float64, bits int) (digits []byte, q int) {
	s := strconv.AppendFloat(buf[:0], math.Abs(f), 'e', -1, bits)
	digits, q = splitE(s)
	if onBound(f, bits, digits, q) || onTie(f, digits) {
		digits, q = strictShortest(f, bits)
	}
	return digits, q
}

// onTie reports whether f lies exactly halfway between digits × 10^q and
// the next decimal of that length. strconv then rounds up; Ryu, as
// Postgres uses it, rounds to the even digit (2^-12 as a real prints
// 0.00024414062, not ...063).
func onTie(f float64, digits []byte) bool {
	var buf [40]byte
	d, q := splitE(strconv.AppendFloat(buf[:0], math.Abs(f), 'e', len(digits)+1, 64))
	if len(d) != len(digits)+1 || d[len(d)-1] != '5' {
		return false
	}
	return decimalRat(d, q).Cmp(new(big.Rat).SetFloat64(math.Abs(f))) == 0
}

// splitE splits strconv's 'e' form (d.ddde±XX) into its digits (in place,
// trailing zeros dropped) and the exponent of the last digit.
func splitE(s []byte) ([]byte, int) {
	e := len(s) - 1
	for s[e] != 'e' {
		e--
	}
	exp, _ := strconv.Atoi(string(s[e+1:]))
	d := s[:0]
	for _, c := range s[:e] {
		if c != '.' {
			d = append(d, c)
		}
	}
	q := exp - (len(d) - 1)
	for len(d) > 1 && d[len(d)-1] == '0' {
		d = d[:len(d)-1]
		q++
	}
	return d, q
}

// onBound reports whether digits × 10^q is exactly a bound of f's rounding
// interval. Only a value whose mantissa is even can have its bound printed
// by strconv, and only a large one: below 2^50 (float64) or 2^21 (float32)
// each bound has more significant digits than the type ever prints.
func onBound(f float64, bits int, digits []byte, q int) bool {
	if bits == 32 {
		b := math.Float32bits(float32(f))
		if b&1 != 0 || math.Abs(f) < 1<<21 {
			return false
		}
	} else {
		b := math.Float64bits(f)
		if b&1 != 0 || math.Abs(f) < 1<<50 {
			return false
		}
	}
	lo, hi := bounds(f, bits)
	d := decimalRat(digits, q)
	return d.Cmp(lo) == 0 || d.Cmp(hi) == 0
}

// bounds returns the exact halfway points between |f| and its neighbours.
func bounds(f float64, bits int) (lo, hi *big.Rat) {
	a := math.Abs(f)
	var below, above float64
	if bits == 32 {
		a32 := float32(a)
		below = float64(math.Nextafter32(a32, 0))
		above = float64(math.Nextafter32(a32, float32(math.Inf(1))))
		if math.IsInf(above, 1) {
			above = a + (a - below)
		}
	} else {
		below = math.Nextafter(a, 0)
		above = math.Nextafter(a, math.Inf(1))
		if math.IsInf(above, 1) {
			// Past MaxFloat64 the spacing stays that of the last binade.
			r := new(big.Rat).SetFloat64(a)
			gap := new(big.Rat).Sub(r, new(big.Rat).SetFloat64(below))
			return mid(r, new(big.Rat).SetFloat64(below)), new(big.Rat).Add(r, gap.Quo(gap, big.NewRat(2, 1)))
		}
	}
	r := new(big.Rat).SetFloat64(a)
	return mid(r, new(big.Rat).SetFloat64(below)), mid(r, new(big.Rat).SetFloat64(above))
}

func mid(a, b *big.Rat) *big.Rat {
	m := new(big.Rat).Add(a, b)
	return m.Quo(m, big.NewRat(2, 1))
}

// decimalRat is digits × 10^q exactly.
func decimalRat(digits []byte, q int) *big.Rat {
	n, _ := new(big.Int).SetString(string(digits), 10)
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(q))), nil)
	if q >= 0 {
		return new(big.Rat).SetInt(n.Mul(n, p))
	}
	return new(big.Rat).SetFrac(n, p)
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

// strictShortest is the shortest decimal strictly inside f's rounding
// interval and, of those, the nearest to f (ties to an even last digit):
// what Ryu prints with its bounds excluded.
func strictShortest(f float64, bits int) ([]byte, int) {
	lo, hi := bounds(f, bits)
	exact := new(big.Rat).SetFloat64(math.Abs(f))
	maxDigits := 17
	if bits == 32 {
		maxDigits = 9
	}
	var buf []byte
	for p := 1; p <= maxDigits; p++ {
		// The nearest p-digit decimal, and its neighbours one unit away
		// (the interval is not symmetric at a power of two).
		s := strconv.AppendFloat(buf[:0], math.Abs(f), 'e', p-1, 64)
		d, q := splitE(s)
		base, _ := new(big.Int).SetString(string(d), 10)
		for i := len(d); i < p; i++ {
			base.Mul(base, big.NewInt(10))
			q--
		}
		var best *big.Rat
		var bestDigits *big.Int
		for _, delta := range []int64{0, -1, 1} {
			c := new(big.Int).Add(base, big.NewInt(delta))
			r := decimalRat([]byte(c.String()), q)
			if r.Cmp(lo) <= 0 || r.Cmp(hi) >= 0 {
				continue
			}
			if best == nil || closer(r, best, exact, c, bestDigits) {
				best, bestDigits = r, c
			}
		}
		if best != nil {
			out := []byte(bestDigits.String())
			for len(out) > 1 && out[len(out)-1] == '0' {
				out = out[:len(out)-1]
				q++
			}
			return out, q
		}
	}
	// Unreachable: 17 (9) digits always identify a double (real).
	return splitE(strconv.AppendFloat(nil, math.Abs(f), 'e', -1, bits))
}

func closer(r, best, exact *big.Rat, rd, bestD *big.Int) bool {
	dr := new(big.Rat).Sub(r, exact)
	db := new(big.Rat).Sub(best, exact)
	c := dr.Abs(dr).Cmp(db.Abs(db))
	if c != 0 {
		return c < 0
	}
	return rd.Bit(0) == 0 && bestD.Bit(0) != 0
}

// appendFloat writes a real (bits 32) or double precision as to_jsonb
// does: Postgres' digits as a plain decimal, 0 for either zero, and NaN and
// ±Infinity as strings.
func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	case f == 0:
		return append(dst, '0')
	}
	var buf [32]byte
	digits, q := floatDigits(buf[:0], f, bits)
	if f < 0 {
		dst = append(dst, '-')
	}
	return appendPlain(dst, digits, q)
}

// appendPlain writes digits × 10^q without an exponent, as numeric_out
// writes the numeric that numeric_in reads from "d.ddde±X".
func appendPlain(dst, digits []byte, q int) []byte {
	switch {
	case q >= 0:
		dst = append(dst, digits...)
		for range q {
			dst = append(dst, '0')
		}
	case -q < len(digits):
		dst = append(dst, digits[:len(digits)+q]...)
		dst = append(dst, '.')
		dst = append(dst, digits[len(digits)+q:]...)
	default:
		dst = append(dst, '0', '.')
		for range -q - len(digits) {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	}
	return dst
}

// pgFloatText is float4out/float8out's text for f (the 'g'-like form
// Postgres prints with extra_float_digits >= 1: exponent when the decimal
// exponent is below -4 or at least 15 (6 for real), at least two exponent
// digits). Tests compare it with the server's own output.
func pgFloatText(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0"
		}
		return "0"
	}
	digits, q := floatDigits(nil, f, bits)
	var out []byte
	if f < 0 {
		out = append(out, '-')
	}
	exp := q + len(digits) - 1
	limit := 15
	if bits == 32 {
		limit = 6
	}
	if exp >= -4 && exp < limit {
		return string(appendPlain(out, digits, q))
	}
	out = append(out, digits[0])
	if len(digits) > 1 {
		out = append(out, '.')
		out = append(out, digits[1:]...)
	}
	out = append(out, 'e')
	if exp < 0 {
		out = append(out, '-')
		exp = -exp
	} else {
		out = append(out, '+')
	}
	if exp < 10 {
		out = append(out, '0')
	}
	return string(strconv.AppendInt(out, int64(exp), 10))
}
