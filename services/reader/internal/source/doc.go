// Package source owns the reader's set-up of and validation against the
// source Postgres: wal_level, the configured tables (existence, replica
// identity key, routing column, reserved column names), the publication, the
// replication slot, and the table descriptions the batcher builds its Arrow
// schemas from; and the reads the stream makes while it decodes (Reads:
// column types, unchanged TOAST values by key from a snapshot that sees the
// change's transaction, generated-column evaluation, attnums, defaults).
//
// Every validation failure says what is wrong and what to run to fix it.
// source must never change a table's definition itself (it prints the ALTER
// TABLE to run instead); the only objects it creates or alters are the
// publication and the slot it is configured to own.
package source
