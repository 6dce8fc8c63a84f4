package publisher

import (
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

// Spec assembles the publisher: its binary (cmd/publisher) and `sluice run`/`sluice dev`
// both build it from here.
var Spec = stack.Spec{Name: "publisher", Needs: stack.Needs{Catalog: true, Packs: true},
	Build: func(cfg config.Config, st *stack.Stack, own stack.Own) (stack.Component, error) {
		p, err := New(cfg, Deps{JS: own.JS, Log: own.Log, Metrics: st.Registry, Catalog: st.Catalog, Packs: st.Packs, Holder: st.HolderID("publisher")})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "publisher", Run: p.Run, Status: func() any { return p.Status() }}, nil
	},
}
