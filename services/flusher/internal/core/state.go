package core

import (
	"encoding/binary"
	"maps"
	"slices"
	"sort"

	"github.com/sluice-cdc/sluice/proto"
)

// Clone returns a deep copy of p (items are copied as values), for the
// model checker, which branches a state into its successors.
func (p *Partition[T]) Clone() *Partition[T] {
	q := *p
	q.loaded = maps.Clone(p.loaded)
	q.npend = maps.Clone(p.npend)
	q.tracks = make(map[uint64]*track, len(p.tracks))
	for s, t := range p.tracks {
		u := *t
		q.tracks[s] = &u
	}
	q.order = slices.DeleteFunc(slices.Clone(p.order), func(n string) bool { return n == "" })
	q.holes = 0
	q.orderAt = make(map[string]int, len(q.order))
	for i, n := range q.order {
		q.orderAt[n] = i
	}
	q.dests = make(map[string]*Dest[T], len(p.dests))
	for n, d := range p.dests {
		e := *d
		e.p = &q
		e.live = slices.Clone(d.live)
		e.pending = make(map[uint64]Span, len(d.pending))
		for k, v := range d.pending {
			e.pending[k] = v
		}
		if d.inflight != nil {
			f := *d.inflight
			f.d = &e
			f.Items = slices.Clone(f.Items)
			e.inflight = &f
		}
		q.dests[n] = &e
	}
	return &q
}

func appendPos(b []byte, p proto.Position) []byte {
	b = binary.AppendUvarint(b, uint64(p.LSN))
	return binary.AppendUvarint(b, p.Seq)
}

// AppendState appends a canonical encoding of p's protocol state to b:
// equal states encode equally whatever the order of their maps. item
// encodes one buffered item.
func (p *Partition[T]) AppendState(b []byte, item func([]byte, T) []byte) []byte {
	flags := uint64(0)
	if p.lost {
		flags |= 1
	}
	if p.seeded {
		flags |= 2
	}
	if p.expired {
		flags |= 4
	}
	if p.drained {
		flags |= 8
	}
	b = binary.AppendUvarint(b, uint64(p.term))
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, p.gen)
	names := make([]string, 0, len(p.loaded)+len(p.dests))
	for n := range p.loaded {
		names = append(names, n)
	}
	sort.Strings(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = append(b, n...)
		b = append(b, 0)
		b = appendPos(b, p.loaded[n])
	}
	tseqs := slices.Sorted(maps.Keys(p.tracks))
	b = binary.AppendUvarint(b, uint64(len(tseqs)))
	for _, s := range tseqs {
		t := p.tracks[s]
		b = binary.AppendUvarint(b, s)
		b = append(b, byte(t.want), byte(t.seen), byte(t.open))
		if t.naked {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	names = slices.DeleteFunc(slices.Clone(p.order), func(n string) bool { return n == "" })
	sort.Strings(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		d := p.dests[n]
		b = append(b, n...)
		b = append(b, 0)
		b = appendPos(b, d.cursor)
		b = appendPos(b, d.maxResolved)
		b = binary.AppendUvarint(b, d.failGen)
		b = binary.AppendUvarint(b, d.epoch)
		if d.halted {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(len(d.live)))
		for _, it := range d.live {
			b = item(b, it)
		}
		if f := d.inflight; f != nil {
			b = append(b, 1, byte(f.step), byte(len(f.steps)), byte(f.steps[1]))
			b = binary.AppendUvarint(b, uint64(f.Term))
			b = binary.AppendUvarint(b, f.Epoch)
			b = binary.AppendUvarint(b, uint64(len(f.Items)))
			for _, it := range f.Items {
				b = item(b, it)
			}
		} else {
			b = append(b, 0)
		}
		seqs := make([]uint64, 0, len(d.pending))
		for s := range d.pending {
			seqs = append(seqs, s)
		}
		slices.Sort(seqs)
		b = binary.AppendUvarint(b, uint64(len(seqs)))
		for _, s := range seqs {
			sp := d.pending[s]
			b = binary.AppendUvarint(b, s)
			b = appendPos(b, sp.First)
			b = appendPos(b, sp.Last)
			if sp.Naked {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	}
	return b
}
