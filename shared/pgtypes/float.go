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
	if onBound(f, bits, digits, q) || onTie(f, bits, digits) {
		digits, q = strictShortest(f, bits, len(digits))
	}
	return digits, q
}

// onTie reports whether f lies exactly halfway between digits × 10^q and
// the next decimal of that length. strconv then rounds up; Ryu, as
// Postgres uses it, rounds to the even digit (2^-12 as a real prints
// 0.00024414062, not ...063).
func onTie(f float64, bits int, digits []byte) bool {
	var buf [40]byte
	d, q := splitE(strconv.AppendFloat(buf[:0], math.Abs(f), 'e', len(digits)+1, 64))
	if len(d) != len(digits)+1 || d[len(d)-1] != '5' {
		return false
	}
	exact, _, _ := parts(f, bits)
	return cmpDecimal(decimalInt(d), q, exact) == 0
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
		if math.Float32bits(float32(f))&1 != 0 || math.Abs(f) < 1<<21 {
			return false
		}
	} else if math.Float64bits(f)&1 != 0 || math.Abs(f) < 1<<50 {
		return false
	}
	_, lo, hi := parts(f, bits)
	d := decimalInt(digits)
	return cmpDecimal(d, q, lo) == 0 || cmpDecimal(d, q, hi) == 0
}

// binary is the exact number n × 2^p.
type binary struct {
	n *big.Int
	p int
}

// parts returns |f| exactly and the halfway points to its neighbours (the
// one below is nearer at the bottom of a binade).
func parts(f float64, bits int) (exact, lo, hi binary) {
	var mant uint64
	var e2 int
	var bottom bool
	if bits == 32 {
		b := math.Float32bits(float32(f)) &^ (1 << 31)
		mant, e2 = uint64(b&(1<<23-1)), int(b>>23)
		if e2 == 0 {
			e2 = 1 - 150
		} else {
			bottom = mant == 0 && e2 > 1
			mant |= 1 << 23
			e2 -= 150
		}
	} else {
		b := math.Float64bits(f) &^ (1 << 63)
		mant, e2 = b&(1<<52-1), int(b>>52)
		if e2 == 0 {
			e2 = 1 - 1075
		} else {
			bottom = mant == 0 && e2 > 1
			mant |= 1 << 52
			e2 -= 1075
		}
	}
	exact = binary{new(big.Int).SetUint64(mant), e2}
	hi = binary{new(big.Int).SetUint64(2*mant + 1), e2 - 1}
	lo = binary{new(big.Int).SetUint64(2*mant - 1), e2 - 1}
	if bottom {
		lo = binary{new(big.Int).SetUint64(4*mant - 1), e2 - 2}
	}
	return exact, lo, hi
}

func decimalInt(digits []byte) *big.Int {
	n, _ := new(big.Int).SetString(string(digits), 10)
	return n
}

// scaled returns d × 10^q and b as integers of one common scale.
func scaled(d *big.Int, q int, b binary) (l, r *big.Int) {
	l, r = new(big.Int).Set(d), new(big.Int).Set(b.n)
	if q >= 0 {
		l.Mul(l, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(q)), nil))
	} else {
		r.Mul(r, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-q)), nil))
	}
	if b.p >= 0 {
		r.Lsh(r, uint(b.p))
	} else {
		l.Lsh(l, uint(-b.p))
	}
	return l, r
}

// cmpDecimal compares d × 10^q with b.
func cmpDecimal(d *big.Int, q int, b binary) int {
	l, r := scaled(d, q, b)
	return l.Cmp(r)
}

// strictShortest is the shortest decimal strictly inside f's rounding
// interval and, of those, the nearest to f (ties to an even last digit):
// what Ryu prints with its bounds excluded. It has at least from digits:
// strconv's shortest, whose interval includes the bounds, is no longer.
func strictShortest(f float64, bits, from int) ([]byte, int) {
	exact, lo, hi := parts(f, bits)
	maxDigits := 17
	if bits == 32 {
		maxDigits = 9
	}
	var buf [40]byte
	for p := from; p <= maxDigits; p++ {
		// The nearest p-digit decimal, and its neighbours one unit away
		// (the interval is not symmetric at the bottom of a binade).
		d, q := splitE(strconv.AppendFloat(buf[:0], math.Abs(f), 'e', p-1, 64))
		base := decimalInt(d)
		var best, bestDist *big.Int
		for _, delta := range []int64{0, -1, 1} {
			c := new(big.Int).Add(base, big.NewInt(delta))
			if c.Sign() <= 0 || cmpDecimal(c, q, lo) <= 0 || cmpDecimal(c, q, hi) >= 0 {
				continue
			}
			l, r := scaled(c, q, exact)
			dist := l.Sub(l, r)
			dist.Abs(dist)
			if best == nil || dist.Cmp(bestDist) < 0 || dist.Cmp(bestDist) == 0 && c.Bit(0) == 0 {
				best, bestDist = c, dist
			}
		}
		if best != nil {
			out := []byte(best.String())
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
