// Package demo is the demo of `sluice dev` without a source: a multi-tenant
// schema in a private Postgres and live traffic against it (inserts,
// updates, deletes, rows moving between tenants, the odd large transaction).
//
// demo must never touch a user's database: it runs only against the private
// cluster `sluice dev` starts itself.
package demo
