// Package flusher is the flusher service: a component with Run(ctx) that its own
// binary (cmd/flusher) and `sluice dev` both call.
package flusher
