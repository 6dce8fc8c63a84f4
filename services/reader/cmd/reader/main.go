// Command reader runs the sluice reader service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/reader"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() {
	os.Exit(stack.Main("reader", stack.Needs{State: true}, func(cfg config.Config, st *stack.Stack) (stack.Component, error) {
		r, err := reader.New(cfg, reader.Deps{JS: st.JS, NC: st.NC, Log: st.Log, Metrics: st.Registry, State: st.State})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "reader", Run: r.Run, Status: func() any { return r.Status() }}, nil
	}))
}
