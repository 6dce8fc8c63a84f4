// Package dev tests `sluice dev` as a person at a terminal meets it: the
// binary under a pseudo-terminal, its demo Postgres and the whole pipeline
// in one process; what it prints (text logs, the start-up summary), what
// `sluice destinations list` shows of the demo's tenants, and the embedded
// NATS server's own monitoring endpoint; and what `make run` runs
// (deploy/run-dev.sh): sluice dev beside a loopback-only Jaeger, traces
// through the UI's trace route, both stopped by Ctrl-C.
package dev
