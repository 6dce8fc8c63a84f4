package split

import (
	"bytes"
	"hash/maphash"
)

// The hash tables map a raw routing value to its bucket for the length of
// one batch. They are open-addressing with linear probing, power-of-two
// sized, kept at most half full. A slot's val is bucket+2, so 0 means empty
// and a dropped value (bucket -1) is 1.

const minSlots = 256

// intTable keys int16/int32/int64 values widened to int64.
type intTable struct {
	keys []int64
	vals []int32
	mask uint64
	n    int
}

// newIntTable returns a table sized for hint distinct values without
// growing.
func newIntTable(hint int) *intTable {
	n := slotsFor(hint)
	return &intTable{keys: make([]int64, n), vals: make([]int32, n), mask: uint64(n - 1)}
}

// slotsFor is the table size that holds hint values at most half full:
// minSlots, or the power of two above 2*(hint+1).
func slotsFor(hint int) int {
	n := minSlots
	for n < 2*(hint+1) {
		n *= 2
	}
	return n
}

func hashInt(k int64) uint64 {
	h := uint64(k) * 0x9E3779B97F4A7C15
	return h ^ h>>29
}

// get returns bucket+2 of k, or 0.
func (t *intTable) get(k int64) int32 {
	for i := hashInt(k) & t.mask; ; i = (i + 1) & t.mask {
		v := t.vals[i]
		if v == 0 || t.keys[i] == k {
			return v
		}
	}
}

func (t *intTable) put(k int64, v int32) {
	if 2*(t.n+1) > len(t.keys) {
		t.grow()
	}
	t.insert(k, v)
	t.n++
}

func (t *intTable) insert(k int64, v int32) {
	i := hashInt(k) & t.mask
	for t.vals[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.keys[i], t.vals[i] = k, v
}

func (t *intTable) grow() {
	keys, vals := t.keys, t.vals
	t.keys = make([]int64, 2*len(keys))
	t.vals = make([]int32, 2*len(vals))
	t.mask = uint64(len(t.keys) - 1)
	for i, v := range vals {
		if v != 0 {
			t.insert(keys[i], v)
		}
	}
}

// bytesTable keys utf8 values by their bytes; a slot remembers where the
// first occurrence sits in the column's value buffer (valid for the batch).
type bytesTable struct {
	seed  maphash.Seed
	data  []byte // the column's value buffer
	slots []bslot
	mask  uint64
	n     int
}

type bslot struct {
	hash       uint64
	start, end int64
	val        int32
}

func newBytesTable(data []byte, hint int) *bytesTable {
	return newBytesTableSeed(data, maphash.MakeSeed(), hint)
}

// newBytesTableSeed returns a table hashing with seed, sized for hint
// distinct values: tables that share a seed can share hashes (the chunked
// assignment's merge).
func newBytesTableSeed(data []byte, seed maphash.Seed, hint int) *bytesTable {
	n := slotsFor(hint)
	return &bytesTable{seed: seed, data: data, slots: make([]bslot, n), mask: uint64(n - 1)}
}

func (t *bytesTable) hash(v []byte) uint64 { return maphash.Bytes(t.seed, v) }

func (t *bytesTable) get(h uint64, v []byte) int32 {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.val == 0 {
			return 0
		}
		if s.hash == h && bytes.Equal(t.data[s.start:s.end], v) {
			return s.val
		}
	}
}

func (t *bytesTable) put(h uint64, start, end int64, v int32) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots = make([]bslot, 2*len(old))
		t.mask = uint64(len(t.slots) - 1)
		for _, s := range old {
			if s.val != 0 {
				t.insert(s)
			}
		}
	}
	t.insert(bslot{hash: h, start: start, end: end, val: v})
	t.n++
}

func (t *bytesTable) insert(s bslot) {
	i := s.hash & t.mask
	for t.slots[i].val != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = s
}
