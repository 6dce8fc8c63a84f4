// Package indexer is the indexer service: a component with Run(ctx) that its own
// binary (cmd/indexer) and `sluice dev` both call.
package indexer
