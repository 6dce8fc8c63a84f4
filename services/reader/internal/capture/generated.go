package capture

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// EvalFunc runs sql (source.GeneratedSQL) with args, the text forms (nil:
// NULL) of its inputs, and returns its one row: one text form (nil: NULL)
// per generated column.
type EvalFunc func(ctx context.Context, sql string, args [][]byte) ([][]byte, error)

// genEval evaluates a relation's stored generated columns, which pgoutput
// before Postgres 18 does not send, on the change's own values: Postgres
// requires generation expressions to be immutable, so the value is the one
// the change stored, whatever happened to the row since (no read of the
// table, which would see the row as it is now). Built once per Relation
// message; the statement text is the same for every change, so the pool
// prepares it once per connection.
type genEval struct {
	cols []source.Generated
	deps [][]int // per generated column, the schema indexes of its inputs
	sql  string
	in   []int    // per statement parameter, its schema index
	args [][]byte // reused parameter buffer
}

func newGenEval(sc *batch.Schema, gens []source.Generated) (genEval, error) {
	if len(gens) == 0 {
		return genEval{}, nil
	}
	idx := func(name string) int {
		return slices.IndexFunc(sc.Columns, func(c batch.Column) bool { return c.Name == name })
	}
	g := genEval{cols: gens}
	for _, c := range gens {
		var d []int
		for _, in := range c.Inputs {
			i := idx(in.Name)
			if i < 0 {
				return genEval{}, fmt.Errorf("generated column %s reads %s, which the stream does not send", c.Name, in.Name)
			}
			d = append(d, i)
		}
		g.deps = append(g.deps, d)
	}
	var inputs []string
	g.sql, inputs = source.GeneratedSQL(gens)
	for _, name := range inputs {
		g.in = append(g.in, idx(name))
	}
	g.args = make([][]byte, len(g.in))
	return g, nil
}

func (g *genEval) checkComputable(identityFull bool) error {
	for _, c := range g.cols {
		if err := c.CheckComputable(identityFull); err != nil {
			return err
		}
	}
	return nil
}

// unchangedInputs counts generated column j's inputs that r leaves
// TOAST-unchanged.
func (g *genEval) unchangedInputs(r *batch.Row, j int) int {
	n := 0
	for _, i := range g.deps[j] {
		if r.Kinds[i] == batch.Unchanged {
			n++
		}
	}
	return n
}

// computable reports whether every generated column is either computable
// from r or unchanged with all its inputs.
func (g *genEval) computable(r *batch.Row) bool {
	for j := range g.cols {
		if u := g.unchangedInputs(r, j); u > 0 && u < len(g.deps[j]) {
			return false
		}
	}
	return true
}

// fillGenerated appends the values of the stored generated columns to r:
// evaluated on r's values for an insert or update; TOAST-unchanged for one
// whose inputs are all unchanged (its value is too); NULL in a delete, and
// where an input stays unknown (a moved row whose unchanged values the
// source no longer holds: it was deleted since, and that delete follows).
func (s *session) fillGenerated(ctx context.Context, t *tableState, r *batch.Row, c *pgoutput.Change) error {
	g := &t.gen
	if len(g.cols) == 0 {
		return nil
	}
	var vals [][]byte
	if c.Op != pgoutput.TypeDelete && s.o.Eval != nil {
		for k, i := range g.in {
			g.args[k] = nil
			if r.Kinds[i] == batch.Text {
				g.args[k] = r.Values[i]
			}
		}
		var err error
		if vals, err = s.o.Eval(ctx, g.sql, g.args); err != nil {
			return fmt.Errorf("evaluating generated columns of a %s row: %w", t.info.Name, err)
		}
		if len(vals) != len(g.cols) {
			return fmt.Errorf("evaluating generated columns of a %s row: %d values for %d columns", t.info.Name, len(vals), len(g.cols))
		}
	}
	for j, col := range g.cols {
		k, v := batch.Null, []byte(nil)
		if vals != nil {
			switch u := g.unchangedInputs(r, j); {
			case u > 0 && u == len(g.deps[j]):
				k = batch.Unchanged
				r.Unchanged = append(r.Unchanged, col.Name)
			case u == 0 && vals[j] != nil:
				k, v = batch.Text, vals[j]
			}
		}
		r.Kinds, r.Values = append(r.Kinds, k), append(r.Values, v)
	}
	return nil
}
