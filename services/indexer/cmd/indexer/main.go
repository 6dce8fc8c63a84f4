// Command indexer runs the sluice indexer service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() {
	os.Exit(stack.Main("indexer", stack.Needs{Catalog: true, Packs: true}, func(cfg config.Config, st *stack.Stack) (stack.Component, error) {
		i, err := indexer.New(cfg, indexer.Deps{JS: st.JS, Log: st.Log, Metrics: st.Registry, Catalog: st.Catalog, Packs: st.Packs})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "indexer", Run: i.Run, Status: func() any { return i.Status() }}, nil
	}))
}
