package pgtypes

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// floatCases is a deterministic set of doubles that exercises every format
// rule: random bit patterns (all exponents, subnormals), integers past 2^53
// where a shortest decimal can sit on a rounding bound, powers of two
// (asymmetric intervals), the exponent thresholds, zeros, NaN, infinities.
func floatCases(n int) []float64 {
	r := rand.New(rand.NewPCG(20, 26))
	out := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1),
		18014398509529112, 33554448, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64,
		1e15, 999999999999999.9, 1e-4, 9.999999999999999e-5, 1e6, 999999.94, 1e-5, 0.1, 1.0 / 3, 5e-324, 1e300}
	for e := -1074; e <= 1023; e++ {
		out = append(out, math.Ldexp(1, e), -math.Ldexp(1, e))
	}
	for i := 0; i < n; i++ {
		switch i % 4 {
		case 0:
			out = append(out, math.Float64frombits(r.Uint64()))
		case 1: // large integers with even mantissas
			out = append(out, math.Ldexp(float64((r.Int64N(1<<53)|1<<52)&^1), 1+r.IntN(40)))
		case 2: // float32 values, widened
			out = append(out, float64(math.Float32frombits(r.Uint32())))
		default: // decimals near the format thresholds
			out = append(out, math.Pow(10, float64(r.IntN(40)-20))*(1+r.Float64()))
		}
	}
	return out
}

// TestFloatsAsPostgresPrints compares, for every value, float8out/float4out
// (x::text with extra_float_digits=3) and to_jsonb(x) from the server with
// pgFloatText and appendFloat. strconv's shortest digits fail this for
// values whose shortest decimal is a rounding bound.
func TestFloatsAsPostgresPrints(t *testing.T) {
	conn := connect(t, pgtest.NewDB(t), sessionParams)
	ctx := context.Background()
	vals := floatCases(20000)
	f32 := make([]float32, 0, len(vals))
	for _, v := range vals {
		if f := float32(v); !math.IsInf(float64(f), 0) || math.IsInf(v, 0) {
			f32 = append(f32, f)
		}
	}
	check := func(bits int, sql string, arg any, want func(i int) float64) {
		rows, err := conn.Query(ctx, sql, arg)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		i, bad := 0, 0
		for rows.Next() {
			var text, jsonb string
			if err := rows.Scan(&text, &jsonb); err != nil {
				t.Fatal(err)
			}
			f := want(i)
			i++
			got := pgFloatText(f, bits)
			gotJSON := string(appendFloat(nil, f, bits))
			if got != text || gotJSON != jsonb {
				if bad++; bad <= 10 {
					t.Errorf("float%d %b: text %s (Postgres %s), to_jsonb %s (Postgres %s)", bits, f, got, text, gotJSON, jsonb)
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if bad > 0 {
			t.Errorf("float%d: %d of %d values differ", bits, bad, i)
		}
		t.Logf("float%d: %d values as Postgres prints them", bits, i)
	}
	check(64, `SELECT x::text, to_jsonb(x)::text FROM unnest($1::float8[]) WITH ORDINALITY AS u(x, n) ORDER BY n`,
		vals, func(i int) float64 { return vals[i] })
	check(32, `SELECT x::text, to_jsonb(x)::text FROM unnest($1::float4[]) WITH ORDINALITY AS u(x, n) ORDER BY n`,
		f32, func(i int) float64 { return float64(f32[i]) })
}
