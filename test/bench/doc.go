// Package bench measures sluice end to end: sustained rows per second from
// source commit to published snapshot, and commit-to-visible latency at a
// fixed offered rate, for 10, 1,000 and 10,000 tenants (make bench).
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
//     through_lsn reaches it (polled every 25 ms on the HTTP API).
//   - SLUICE_BENCH_TENANTS=10,1000 picks the tenant counts;
//     SLUICE_BENCH_BUDGET (default 3m) bounds the wait for the throughput
//     phase, after which the case reports "not caught up" and an upper
//     bound; SLUICE_BENCH_MODE=multi runs the pipeline as separate processes.
//   - make bench needs -timeout 30m (go test's default of 10m is too short
//     for three tenant counts).
package bench
