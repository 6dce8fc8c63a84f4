package route

import (
	"strconv"
	"testing"
)

// The distinct-destination count is exact up to distinctExact names and
// within 5% beyond (the estimate's standard error is 1.6%), while the
// counter's memory stops growing: past distinctExact it holds no names.
func TestDistinctBounded(t *testing.T) {
	d := newDistinct()
	for i := range distinctExact {
		d.add("t" + strconv.Itoa(i))
		d.add("t" + strconv.Itoa(i/2)) // repeats count once
	}
	if got := d.count(); got != distinctExact {
		t.Fatalf("count %d, want exactly %d", got, distinctExact)
	}
	for _, n := range []int{20_000, 200_000} {
		for i := distinctExact; i < n; i++ {
			d.add("t" + strconv.Itoa(i))
		}
		if d.exact != nil {
			t.Fatalf("%d names: the exact set is still kept (%d names)", n, len(d.exact))
		}
		if got := d.count(); got < n*95/100 || got > n*105/100 {
			t.Fatalf("%d names: estimated %d", n, got)
		}
	}
}
