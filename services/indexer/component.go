package indexer

import (
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

// Spec assembles the indexer: its binary (cmd/indexer) and `sluice run`/`sluice dev`
// both build it from here.
var Spec = stack.Spec{Name: "indexer", Needs: stack.Needs{Catalog: true, Packs: true},
	Build: func(cfg config.Config, st *stack.Stack, own stack.Own) (stack.Component, error) {
		i, err := New(cfg, Deps{JS: own.JS, Log: own.Log, Metrics: st.Registry, Catalog: st.Catalog, Packs: st.Packs})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "indexer", Run: i.Run, Status: func() any { return i.Status() }}, nil
	},
}
