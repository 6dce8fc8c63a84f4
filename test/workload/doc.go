// Package workload generates a seeded, reproducible multi-tenant workload
// against a source Postgres: the schema (several tables of different
// shapes), an initial population with skewed tenant sizes, and live traffic
// (inserts, updates, deletes, re-inserts of deleted keys, rows moving
// between tenants, large transactions, TOAST values updated in other
// columns, a column added mid-run). The end-to-end tests and the crash soak
// drive sluice with it. It lives in the test module because only tests use
// it: `sluice dev`'s demo keeps its own small generator
// (services/sluice/internal/demo), so no runtime module depends on test code.
//
// Reproducibility: a seed fixes every statement. Each worker owns a
// disjoint id space (id mod Workers) and its own random stream, keeps a
// model of its rows and never reads them back, so with the same Options the
// workers issue the same statements in the same order (Stats.Digest proves
// it) and the final database contents are the same, whatever the
// interleaving between workers. Only a failed transaction (a Postgres
// restart in the soak) breaks this: the worker re-reads its rows from the
// database, counts the retry in Stats.Retries, and carries on.
//
// workload owns the tables it creates (names starting with wl_) and must
// never touch any other table, and never use now(), random() or sequences,
// which would make a run irreproducible.
//
// NOTES
//   - Tables(): wl_orders (composite key with the tenant inside it),
//     wl_accounts (REPLICA IDENTITY FULL, single-column key, routed by
//     org_id, not tenant_id), wl_wide (every type of the contract, arrays,
//     an enum and an "other" type, with edge values: NaN, ±Infinity,
//     infinity timestamps, BC dates, huge numerics, empty arrays, NULL
//     elements), wl_docs (100 KB incompressible text bodies, stored out of
//     line, updated in other columns so pgoutput sends them as unchanged
//     TOAST), wl_events (rows spread uniformly over ManyTenants tenants,
//     10,000 in the e2e tests, a 3 KB out-of-line payload on every 2nd row,
//     mostly unchanged by updates and moves).
//   - Generator.Touched lists the tenants every Run changed in a
//     table: the oracle reads all of them and a sample of the rest.
//   - The column added mid-run (wl_orders.priority) has no default: a
//     default would change existing rows without any WAL record, which no
//     CDC pipeline can see.
//   - Tenant names: mostly "t000".."tNNN"; every 37th tenant has a name that
//     is not a plain destination name ("acme.corp/…", "größe …"), so the
//     destination encoding is exercised.
//   - Mix.MoveToast (0 in DefaultMix; the e2e tests use 30) is the share
//     of wl_docs and wl_events moves that leave the TOASTed value untouched: the new destination
//     receives an unchanged-TOAST marker for a row it has never seen.
package workload
