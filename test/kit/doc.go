// Package kit is the end-to-end test kit: it builds and starts the real
// processes (the sluice binary in one-process `sluice dev` mode or as
// separate `sluice run <service>` processes, a real nats-server binary, the
// catalog host `sluice catalog serve`, a private Postgres cluster), kills
// and restarts them (the chaos loop), and judges the result with the
// oracle: every destination's `sluice read` against the source's to_jsonb.
//
// kit drives sluice only through its user contract (binaries, config,
// SLUICE_* environment, the HTTP API and CLI). It must never import a
// service's internals, and never fake a component: the faults it injects
// are real ones (SIGKILL, a broker restart, a Postgres restart), with one
// exception the real broker cannot produce on demand: FaultProxy, in front
// of nats-server, loses one publish of a connection while it forwards the
// later ones (Settings.ReaderNATS puts it before the readers only).
//
// NOTES
//   - Binaries: the sluice binary is built once per test binary
//     (SLUICE_BIN overrides); nats-server is built once per machine into
//     ~/.cache/sluice/bin from the nats-server module the test module
//     requires; Jaeger is looked up in ~/.cache/sluice/bin (see
//     deploy/fetch-jaeger.sh) and its tests skip without it.
//   - Every process runs in its own process group and is killed with its
//     group; its output goes to a log file in the test's directory, and
//     Tail shows the end of it in failure messages.
package kit
