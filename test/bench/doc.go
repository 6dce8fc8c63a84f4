// Package bench measures sluice end to end: sustained rows per second from
// source commit to published snapshot, and commit-to-visible latency at a
// fixed offered rate, for 10, 1,000, 10,000 and 100,000 tenants (make
// bench), with per case the flusher's peak RSS, files written per second
// and ROUTED messages per change batch.
//
// NOTES
//   - Throughput: SLUICE_BENCH_ROWS (default 300,000) narrow rows are
//     committed as fast as two connections can (10,000-row transactions);
//     the figure is rows / (time the snapshot covering the last commit was
//     published - first commit). It includes the drain of any backlog, so it
//     is what the pipeline sustains, not what the source can write.
//   - Latency: 5,000 rows/s offered for SLUICE_BENCH_LATENCY (default 30s)
//     as a 500-row transaction every 100 ms; each commit's LSN is taken
//     right after it commits, and it is visible when the latest snapshot's
//     through_lsn reaches it (polled every 100 ms on the HTTP API: pollEvery).
//   - Per case: rss is the flusher process's VmHWM (`sluice dev` is a new
//     process per case, so it is the case's peak; SLUICE_BENCH_MODE=multi:
//     the largest flusher's); files/s is sluice_flusher_files_written_total
//     over the throughput phase (files counted in the store when the metric
//     is absent); msgs/batch is sluice_router_messages_published_total per
//     routed change batch over the same phase.
//   - CPU: cpu-ms/krow is the pipeline processes' user + system CPU
//     (/proc/<pid>/stat, chDB's threads included) per 1,000 rows of the
//     throughput phase; cores is their CPU per second of the latency phase.
//     Unlike rows/s and latency these do not depend on what else the
//     machine runs, so they compare runs made at different loads.
//   - The table's key is (tenant_id, id), the multi-tenant key sluice
//     expects (the routing column in the replica identity). Its inserts
//     land at one btree position per tenant, so the source itself takes
//     longer at more tenants (measured on Postgres alone, 1,500,000 rows in
//     two connections: 2.0-2.1 s at 10 tenants, 3.7-4.2 s at 10,000): the
//     load column shows it. SLUICE_BENCH_KEY="id, tenant_id" gives every
//     tenant count the same source cost, to compare sluice alone.
//   - SLUICE_BENCH_TENANTS (default 10,1000,10000,100000) picks the tenant
//     counts;
//     SLUICE_BENCH_BUDGET (default 3m) bounds the wait for the throughput
//     phase, after which the case reports "not caught up" and an upper
//     bound; SLUICE_BENCH_MODE=multi runs the pipeline as separate processes.
//   - make bench needs -timeout 30m (go test's default of 10m is too short
//     for three tenant counts).
package bench
