// Package e2e drives sluice only through its user contract — the sluice
// binary, its config, SLUICE_* environment, `sluice wait` and `sluice read`
// — against a real Postgres, and checks every destination against the
// source with the oracle of test/kit: `sluice read --format jsonl
// --snapshot V` must equal `SELECT to_jsonb(t)` of that tenant's rows (same
// keys, same values), no destination may hold another tenant's row, and a
// destination whose tenant has no rows left must read empty.
//
// Tests (all skip with -short):
//   - TestContractOneProcess: the contract smoke (../shared/tools/contract-smoke) in Go.
//   - TestOracleOneProcess / TestOracleMultiProcess: the test/workload
//     generator (5 table shapes, skewed tenants, moves, re-inserts, a large
//     transaction, TOAST, an added column, and wl_events, whose rows
//     spread over 10,000 tenants) populated before start (backfill) and
//     run live; then the oracle. wl_events is checked by sample: every
//     tenant the run changed (moved from or to, updated, deleted,
//     inserted) plus 20 others drawn at random (kit.Sample;
//     SLUICE_E2E_SAMPLE sets the count, "all" reads every tenant). Multi-process: a real
//     nats-server, `sluice catalog serve`, 2 readers (one standby), 2
//     routers, 3 flushers, 2 indexers, 2 publishers as `sluice run`
//     processes. Each also checks that the oracle finds the pre-workload
//     snapshot stale (the oracle's own negative control).
//   - TestSoakOneProcess / TestSoakMultiProcess: the workload while a chaos
//     loop SIGKILLs service processes (and in multi-process mode restarts
//     nats-server and kills the catalog host once), and Postgres is
//     crashed once; then the oracle. SLUICE_SOAK_DURATION sets the length
//     (make soak); default 60s each.
//   - TestOracleCluster: the multi-process pipeline on a three-node
//     JetStream cluster (kit.NATSCluster, streams at replicas 3) through
//     a kill -9 of the CHANGES stream leader and its restart, a stalled
//     node, the kill of one router, flusher and indexer, the active
//     reader and the lease-holding publisher (each replica's share of the
//     work and the takeover times are printed and bounded,
//     spread_test.go), the oracle, then a quorum loss that status,
//     metrics and logs must name. TestSoakCluster is its soak (make soak
//     only); TestScalingCosts (SLUICE_SCALING=1) measures the per-unit
//     costs of docs/scaling.md.
//   - TestNegative*: a safety rule switched off through a SLUICE_UNSAFE_*
//     switch (SLUICE_NEGATIVE=1 runs them; they skip while the services do
//     not acknowledge the switch). The flusher's is the soak; the reader's
//     (rule 2) loses one publish through kit.FaultProxy instead, with
//     TestReaderLostPublishSurvived as its positive twin (the same fault,
//     rule on; ~15 s, in make test). readerloss_test.go says why.
//   - TestFailoverSameSlot: kill -9 of a Postgres 17+ primary under load
//     and promotion of a standby that synchronizes the slot (ADR 0039).
//   - TestStandbyDecoding: sluice dev decodes from a Postgres 16+ hot
//     standby and writes to its primary (source.primary_dsn): load on the
//     primary, a resync, kill -9 of sluice midway, the oracle (ADR 0045).
//   - TestToastScenarios: one key per TOAST scenario, to name the one that
//     breaks rule 6.
//   - TestRecoveryAfterKill: `sluice dev` with 1,000 tenants under load,
//     kill -9, immediate restart; caught up within 30 s of the kill, then
//     the oracle. Timed, so make bench runs it (SLUICE_E2E_RECOVERY=1).
//   - TestTraceEndToEnd: spans of one transaction in all five services,
//     through Jaeger v2's query API (skips without the Jaeger binary; see
//     deploy/fetch-jaeger.sh).
//
// SLUICE_E2E_KEEP=dir keeps the logs of failed tests; SLUICE_E2E_MOVE_TOAST
// sets the workload's MoveToast percentage (default 30); SLUICE_E2E_SAMPLE
// the number of unchanged wl_events tenants the oracle reads (default 20,
// "all").
package e2e
