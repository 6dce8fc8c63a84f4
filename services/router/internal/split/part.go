package split

import (
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// partRecord is a zero-copy window [lo, hi) of the permuted batch that
// builds its column slices only when they are first read.
//
// At 10K destinations a batch has 10K parts; slicing 12 columns of each
// eagerly (array.NewSlice + NewRecordBatch) cost as much as a third of the
// take and ~30 small allocations per part. Built lazily, the slices are made
// by whoever reads the part (the encoder, in parallel across parts), and a
// part that is only counted or re-sliced never builds them.
type partRecord struct {
	refs   atomic.Int64
	parent arrow.RecordBatch // retained by this part
	lo, hi int64

	once sync.Once
	cols []arrow.Array
}

var _ arrow.RecordBatch = (*partRecord)(nil)

func newPart(parent arrow.RecordBatch, lo, hi int64) *partRecord {
	return initPart(&partRecord{}, parent, lo, hi)
}

// initPart makes p (zero) the window [lo, hi) of parent: SplitBy
// allocates a batch's parts in one block.
func initPart(p *partRecord, parent arrow.RecordBatch, lo, hi int64) *partRecord {
	parent.Retain()
	p.parent, p.lo, p.hi = parent, lo, hi
	p.refs.Store(1)
	return p
}

func (p *partRecord) columns() []arrow.Array {
	p.once.Do(func() {
		src := p.parent.Columns()
		cols := make([]arrow.Array, len(src))
		for i, c := range src {
			d := array.NewSliceData(c.Data(), p.lo, p.hi)
			cols[i] = array.MakeFromData(d)
			d.Release()
		}
		p.cols = cols
	})
	return p.cols
}

func (p *partRecord) Retain() { p.refs.Add(1) }

func (p *partRecord) Release() {
	if p.refs.Add(-1) != 0 {
		return
	}
	for _, c := range p.cols {
		c.Release()
	}
	p.cols = nil
	p.parent.Release()
}

func (p *partRecord) Schema() *arrow.Schema    { return p.parent.Schema() }
func (p *partRecord) NumRows() int64           { return p.hi - p.lo }
func (p *partRecord) NumCols() int64           { return p.parent.NumCols() }
func (p *partRecord) Columns() []arrow.Array   { return p.columns() }
func (p *partRecord) Column(i int) arrow.Array { return p.columns()[i] }
func (p *partRecord) ColumnName(i int) string  { return p.parent.ColumnName(i) }

// MarshalJSON marshals the part's rows like an ordinary record.
func (p *partRecord) MarshalJSON() ([]byte, error) {
	r := array.NewRecordBatch(p.Schema(), p.columns(), p.NumRows())
	defer r.Release()
	return r.MarshalJSON()
}

// SetColumn returns an ordinary record with column i replaced.
func (p *partRecord) SetColumn(i int, col arrow.Array) (arrow.RecordBatch, error) {
	r := array.NewRecordBatch(p.Schema(), p.columns(), p.NumRows())
	defer r.Release()
	return r.SetColumn(i, col)
}

// NewSlice returns rows [i, j) of the part, lazily sliced as well.
func (p *partRecord) NewSlice(i, j int64) arrow.RecordBatch {
	if i < 0 || j < i || j > p.NumRows() {
		panic("split: part slice out of range")
	}
	return newPart(p.parent, p.lo+i, p.lo+j)
}
