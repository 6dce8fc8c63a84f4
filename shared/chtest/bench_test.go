package chtest_test

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/shared/chtest"
)

// BenchmarkTrivialQuery measures one SELECT 1 round trip per backend: chDB
// in-process, and clickhouse-go over chdbhttp (loopback HTTP).
func BenchmarkTrivialQuery(b *testing.B) {
	for _, be := range chtest.Backends(b) {
		b.Run(be.Name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				if _, err := be.Conn.Query(ctx, "SELECT 1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQuery10kRows measures reading and normalizing 10,000 rows of
// three columns per backend.
func BenchmarkQuery10kRows(b *testing.B) {
	for _, be := range chtest.Backends(b) {
		b.Run(be.Name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				res, err := be.Conn.Query(ctx, "SELECT number, toString(number), toDecimal64(number, 2) FROM numbers(10000)")
				if err != nil || len(res.Rows) != 10000 {
					b.Fatal(err)
				}
			}
		})
	}
}
