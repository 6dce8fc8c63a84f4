package split

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestPoolHugeBuffers: a pooled buffer of hugeMin bytes or more is advised
// for huge pages (its pages dropped and faulted back in): it must read as
// zeros when fresh, keep what is written to it, and come back from the pool
// on the next allocation of its class.
func TestPoolHugeBuffers(t *testing.T) {
	p := NewPool(64 << 20)
	size := hugeMin + 12345
	b := p.Allocate(size)
	if len(b) != size {
		t.Fatalf("len %d, want %d", len(b), size)
	}
	for i, x := range b {
		if x != 0 {
			t.Fatalf("fresh buffer byte %d = %d, want 0", i, x)
		}
	}
	for i := range b {
		b[i] = byte(i)
	}
	for i := 0; i < len(b); i += 4093 {
		if b[i] != byte(i) {
			t.Fatalf("byte %d = %d after write", i, b[i])
		}
	}
	if runtime.GOOS == "linux" {
		t.Logf("AnonHugePages after a %d-byte buffer: %d kB (0 when THP is off)", size, anonHugeKB())
	}
	p.Free(b)
	if p.Pooled() != int64(cap(b)) {
		t.Fatalf("pooled %d, want %d", p.Pooled(), cap(b))
	}
	c := p.Allocate(size - 1)
	if &c[0] != &b[0] {
		t.Fatal("the freed buffer was not reused")
	}
	p.Free(c)
}

// TestSplitPropertyHugeAdvice runs the property test with every pooled
// buffer of a page or more put through adviseHuge (its pages dropped and
// faulted back in): no kernel may depend on what a fresh buffer held.
func TestSplitPropertyHugeAdvice(t *testing.T) {
	defer func(m int) { hugeMin = m }(hugeMin)
	hugeMin = 4096
	splitProperty(t, 6)
}

func anonHugeKB() int {
	raw, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "AnonHugePages:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}
