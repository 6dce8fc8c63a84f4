package pgtypes

import (
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/sluice-cdc/sluice/proto"
)

// NewBuilder returns a builder of kind's Arrow type (proto.Kind.ArrowType),
// ready for AppendText. It returns nil for a kind proto does not know; kinds
// from Resolve are always known.
func NewBuilder(mem memory.Allocator, kind proto.Kind) array.Builder {
	dt, err := kind.ArrowType()
	if err != nil {
		return nil
	}
	return array.NewBuilder(mem, dt)
}
