// Command router runs the sluice router service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/router"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() {
	os.Exit(stack.Main("router", stack.Needs{State: true}, func(cfg config.Config, st *stack.Stack) (stack.Component, error) {
		r, err := router.New(cfg, router.Deps{JS: st.JS, Log: st.Log, Metrics: st.Registry, Pool: st.State})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "router", Run: r.Run, Status: func() any { return r.Status() }}, nil
	}))
}
