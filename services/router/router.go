// Package router is the router service: a component with Run(ctx) that its own
// binary (cmd/router) and `sluice dev` both call.
package router
