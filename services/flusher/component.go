package flusher

import (
	"log/slog"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

// Spec assembles the flusher: its binary (cmd/flusher) and `sluice run`/`sluice dev`
// both build it from here.
var Spec = stack.Spec{Name: "flusher", Needs: stack.Needs{State: true, Packs: true},
	// The memory limit is process-wide: set only when the flusher has its
	// process to itself (see SetMemoryLimit).
	Alone: func(cfg config.Config, log *slog.Logger) {
		log.Info("memory limit", "bytes", SetMemoryLimit(cfg))
	},
	Build: func(cfg config.Config, st *stack.Stack, own stack.Own) (stack.Component, error) {
		f, err := New(cfg, Deps{JS: own.JS, Log: own.Log, Metrics: st.Registry, Pool: st.State, Store: st.Packs, ID: st.HolderID("flusher")})
		if err != nil {
			return stack.Component{}, err
		}
		return stack.Component{Name: "flusher", Run: f.Run, Status: func() any { return f.Status() },
			Summary: func() any { return f.Summary() }}, nil
	},
}
