package arrowcodec

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
	"fmt"
	"runtime"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestHangHunt(t *testing.T) {
	mem := memory.NewGoAllocator()
	rec := batch(mem, 20)
	var seeds [][]byte
	for _, c := range []Compression{None, Zstd, LZ4} {
		b, _ := EncodeWith(rec, c)
		seeds = append(seeds, b)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		b := append([]byte(nil), seeds[r.IntN(3)]...)
		for k := 0; k < 1+r.IntN(4); k++ {
			switch r.IntN(3) {
			case 0:
				b[r.IntN(len(b))] = byte(r.Uint32())
			case 1:
				p := r.IntN(len(b) - 8)
				for j := 0; j < 8; j++ { b[p+j] = 0xff }
			case 2:
				p := r.IntN(len(b) - 4)
				b[p+3] = byte(r.IntN(128))
			}
		}
		done := make(chan struct{})
		go func() { defer func(){recover()}(); rr, err := Decode(b, nil); if err == nil { rr.Release() }; close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			os.WriteFile("/tmp/hang.bin", b, 0o644)
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			fmt.Println(string(buf[:n]))
			t.Fatalf("hang at iteration %d", i)
		}
	}
}
