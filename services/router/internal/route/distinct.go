package route

import (
	"math"
	"math/bits"

	"github.com/sluice-cdc/sluice/proto"
)

// distinctExact is how many destination names a distinct counter keeps;
// past it the count is estimated.
const distinctExact = 4096

// hllBits: 2^12 one-byte registers (4 KiB), a standard error of
// 1.04/sqrt(4096) = 1.6%.
const hllBits = 12

// distinct counts the distinct destinations the router has routed to in
// bounded memory, whatever their number: exactly while there are at most
// distinctExact (a set of names), then by a HyperLogLog estimate over the
// same stream (the set is dropped). The router keeps no other
// per-destination memory. Not safe for concurrent use.
type distinct struct {
	exact map[string]struct{} // nil once past distinctExact
	regs  [1 << hllBits]uint8
}

func newDistinct() *distinct {
	return &distinct{exact: map[string]struct{}{}}
}

func (d *distinct) add(name string) {
	h := proto.Hash64(name)
	i := h >> (64 - hllBits)
	rho := uint8(bits.LeadingZeros64(h<<hllBits|1<<(hllBits-1)) + 1)
	if rho > d.regs[i] {
		d.regs[i] = rho
	}
	if d.exact == nil {
		return
	}
	d.exact[name] = struct{}{}
	if len(d.exact) > distinctExact {
		d.exact = nil
	}
}

// count is the number of distinct names added: exact up to distinctExact,
// estimated (±1.6%) beyond.
func (d *distinct) count() int {
	if d.exact != nil {
		return len(d.exact)
	}
	const m = float64(1 << hllBits)
	sum, zeros := 0.0, 0
	for _, r := range d.regs {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	est := 0.7213 / (1 + 1.079/m) * m * m / sum
	if est <= 2.5*m && zeros > 0 { // small range: linear counting
		est = m * math.Log(m/float64(zeros))
	}
	return int(math.Round(est))
}
