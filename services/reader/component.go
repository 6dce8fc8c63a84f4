package reader

import (
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

// Spec assembles the reader: its binary (cmd/reader) and `sluice run`/`sluice dev`
// both build it from here.
var Spec = stack.Spec{Name: "reader", Needs: stack.Needs{State: true},
	Build: func(cfg config.Config, st *stack.Stack, own stack.Own) (stack.Component, error) {
		r, err := New(cfg, Deps{JS: own.JS, Log: own.Log, Metrics: st.Registry, State: st.State, Holder: st.HolderID("reader")})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "reader", Run: r.Run, Status: func() any { return r.Status() }}, nil
	},
}
