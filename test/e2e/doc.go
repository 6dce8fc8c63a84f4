// Package e2e drives sluice only through its user contract — the sluice
// binary, its config file, `sluice wait` and `sluice read` — against a real
// private Postgres, and checks every destination against the source with an
// oracle: `sluice read --format jsonl` must equal `SELECT to_jsonb(t)` of
// that tenant's rows, and no destination may hold another tenant's row.
package e2e
