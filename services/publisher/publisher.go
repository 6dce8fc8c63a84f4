// Package publisher is the publisher service: a component with Run(ctx) that its own
// binary (cmd/publisher) and `sluice dev` both call.
package publisher
