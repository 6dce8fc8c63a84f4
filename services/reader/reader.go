// Package reader is the reader service: a component with Run(ctx) that its own
// binary (cmd/reader) and `sluice dev` both call.
package reader
