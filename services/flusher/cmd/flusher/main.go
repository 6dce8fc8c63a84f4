// Command flusher runs the sluice flusher service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/flusher"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() {
	os.Exit(stack.Main("flusher", stack.Needs{State: true, Packs: true}, func(cfg config.Config, st *stack.Stack) (stack.Component, error) {
		f, err := flusher.New(cfg, flusher.Deps{JS: st.JS, NC: st.NC, Log: st.Log, Metrics: st.Registry, Pool: st.State, Store: st.Packs})
		if err != nil {
			return stack.Component{}, err
		}
		st.Log.Info("memory limit", "bytes", flusher.SetMemoryLimit(cfg))
		return stack.Component{Name: "flusher", Run: f.Run, Status: func() any { return f.Status() }}, nil
	}))
}
