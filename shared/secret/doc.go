// Package secret owns the secrets sluice generates for itself on first
// start (the `catalog serve` password, the demo Postgres password, the
// embedded NATS credentials) and the permissions of what it keeps on disk:
// a generated secret is written 0600 inside a 0700 directory, created
// atomically so a reader never sees half of one, and read back on every
// later start. It must never log a secret or write one with wider
// permissions, and never overwrite a secret that exists.
package secret
