// Package ops checks the deployment artefacts against the code: compose.yaml
// (validated by the compose CLI when one is available, and structurally
// always), the one multi-stage Dockerfile (every target's binary builds),
// the sluice config the containers get, the Postgres init script and the
// demo traffic loop (run against a real Postgres), the Prometheus
// configuration and alert rules (promtool check and promtool's rule unit
// tests when promtool is available), and the Grafana provisioning and
// dashboard (every metric they use is registered by some service, or is on
// the short, reported list of proposed metrics). TestComposeTopology runs
// compose.yaml's own sluice services as local processes over local
// equivalents of its infrastructure (composeproc_test.go says how a
// container's network and volumes are emulated) and checks the result
// with the oracle; copies with a misspelt variable, a wrong port and a
// wrong host each keep a service from coming up. TestLiveMonitoring runs
// the compose prometheus service the same way (Debian's Prometheus, the
// shipped prometheus.yml with only its targets and intervals rewritten,
// alerts.yml unchanged) over those services: no alert while healthy,
// every dashboard and alert metric in a live scrape, and a halted table
// and a killed replica fire their alerts (liveprom_test.go). docs_test.go checks the
// docs against the tree the same way: ARCHITECTURE.md's layout lists every
// package (each with a doc.go), and every name INVARIANTS.md gives exists,
// each rule of its table naming both its code and its test.
//
// ops must never need a Docker engine (none runs on these machines) nor
// reach the network: it reads files, runs CLIs and builds binaries locally.
//
// NOTES
//   - compose.yaml is loaded with compose-go (the loader and JSON-schema
//     validator of `docker compose` v2) in every run, so the check never
//     depends on a CLI; the CLI check runs in addition when one is found.
//   - Compose CLI lookup: `docker compose` (v2 plugin), then
//     ~/.cache/sluice/bin/docker-compose, then docker-compose on PATH
//     (Debian's 1.29, which knows no top-level `name:`; compose.yaml avoids it).
//   - promtool: PATH (Debian's prometheus package) or ~/.cache/sluice/bin.
//   - prometheus (the server, same package): without it TestLiveMonitoring
//     skips, except with CI set, where it fails. prometheus-nats-exporter
//     is not run (no package or module for it reaches these machines), so
//     the jetstream_* metrics are listed as not checked.
package ops
