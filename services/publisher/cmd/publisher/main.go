// Command publisher runs the sluice publisher service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() {
	os.Exit(stack.Main("publisher", stack.Needs{Catalog: true}, func(cfg config.Config, st *stack.Stack) (stack.Component, error) {
		p, err := publisher.New(cfg, publisher.Deps{JS: st.JS, Log: st.Log, Metrics: st.Registry, Catalog: st.Catalog})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "publisher", Run: p.Run, Status: func() any { return p.Status() }}, nil
	}))
}
