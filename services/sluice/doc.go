// Package main is the sluice command: the one-process runner (sluice dev),
// the per-service runner (sluice run) and the operator CLI.
package main
