package proto

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Reserved system columns. Every batch on CHANGES and ROUTED, and every pack,
// carries them after the source table's own columns. A source column whose
// name starts with SystemPrefix is refused at start-up.
const (
	SystemPrefix = "_sluice_"

	ColOp         = "_sluice_op"          // int8: OpInsert, OpUpdate, OpDelete, OpMoveOut, OpClear
	ColLSN        = "_sluice_lsn"         // uint64: commit LSN of the change's transaction
	ColSeq        = "_sluice_seq"         // uint64: ordinal of the change in its transaction, from 1
	ColCommitTime = "_sluice_commit_time" // timestamp[us, UTC]: commit time at the source
	ColUnchanged  = "_sluice_unchanged"   // list<utf8>: columns whose TOASTed value did not change (value is NULL in the row)
	// ColNulls exists only in packs: the array columns whose value is NULL in
	// the row. ClickHouse arrays cannot be NULL (a NULL Arrow list reads as
	// []), so the catalog keeps the distinction here. The pack writer adds it
	// when some array value of the pack is NULL.
	ColNulls = "_sluice_nulls" // list<utf8>
	// ColClaims exists only on CHANGES and ROUTED, in a batch that carries
	// a value by reference (a claim check): it names the columns of the row
	// whose value is not in the row (NULL there) but in the pack store at
	// ClaimPath(table, the row's position, column), as the Postgres text form
	// the stream sent. The reader writes the object (durably) before it
	// publishes the batch; the router passes the column through; the flusher
	// puts the values back in before it writes the pack, so packs and the
	// catalog never see it. Such a batch has the table's schema plus this
	// last field, so its fingerprint differs from the table's.
	ColClaims = "_sluice_claims" // list<utf8>
)

// ClaimsDir is the top directory of claim-check objects in the pack store:
// it starts with a dot, so it is no destination and a pack listing skips it.
const ClaimsDir = ".claims"

// ClaimPath is the pack-store path of the value of column in table's row at
// pos when it is carried by reference: deterministic, so a replayed batch
// rewrites the same object. The column name is hex-encoded (any name is a
// valid path segment).
func ClaimPath(table string, pos Position, column string) string {
	return fmt.Sprintf("%s/%s/%016x-%d/%s", ClaimsDir, table, uint64(pos.LSN), pos.Seq, hex.EncodeToString([]byte(column)))
}

// ParseClaimPath is ClaimPath's inverse: the table, position and column a
// claim path names.
func ParseClaimPath(path string) (table string, pos Position, column string, err error) {
	parts := strings.Split(path, "/")
	if len(parts) != 4 || parts[0] != ClaimsDir {
		return "", Position{}, "", fmt.Errorf("claim path %q: want %s/<table>/<lsn>-<seq>/<column, hex>", path, ClaimsDir)
	}
	l, q, ok := strings.Cut(parts[2], "-")
	lsn, err1 := strconv.ParseUint(l, 16, 64)
	seq, err2 := strconv.ParseUint(q, 10, 64)
	col, err3 := hex.DecodeString(parts[3])
	if !ok || len(l) != 16 || err1 != nil || err2 != nil || err3 != nil {
		return "", Position{}, "", fmt.Errorf("claim path %q: want %s/<table>/<lsn, 16 hex>-<seq>/<column, hex>", path, ClaimsDir)
	}
	return parts[1], Position{LSN: LSN(lsn), Seq: seq}, string(col), nil
}

// Op codes of ColOp.
const (
	OpInsert int8 = 1
	OpUpdate int8 = 2
	OpDelete int8 = 3
	// OpMoveOut is the delete of a row's old identity when an UPDATE changed
	// its primary key or its routing value: the old identity is deleted and
	// the new row inserted, both at the same position. Apply treats it as
	// OpDelete; the router counts it as a routing mutation when the routing
	// value differs from the paired row's.
	OpMoveOut int8 = 4
	// OpClear is a clear of the table in one destination (a TRUNCATE, or
	// the end of a resync): its position (_sluice_lsn, _sluice_seq) is its
	// bound P, and a snapshot holding it reads none of that destination's
	// rows of the table at a position below P. Its key, routing and value
	// columns are NULL, except the routing column of a clear scoped to one
	// destination, which holds that destination's routing value. A row
	// with this op is never a row of the table: resolution keeps it apart
	// from every key, and reads take only its bound (docs/adr/0024).
	OpClear int8 = 5
)

// ClearAllDestinations is the ColDestination value of a table-wide clear
// on ROUTED: the router sends a clear whose routing value is NULL to every
// partition under this name, and each partition's flusher turns it into one
// clear row per destination it knows (in memory or by persisted cursor).
// It is no valid destination name, so it never names a real one.
const ClearAllDestinations = "*"

// IsTombstone reports whether op removes the row.
func IsTombstone(op int8) bool { return op == OpDelete || op == OpMoveOut }

// IsClear reports whether op is a clear (OpClear), not a row of the table.
func IsClear(op int8) bool { return op == OpClear }

// IsSystemColumn reports whether name is reserved by sluice.
func IsSystemColumn(name string) bool { return strings.HasPrefix(name, SystemPrefix) }

// Schema-level Arrow metadata keys every batch schema carries.
const (
	MetaTable = "sluice.table" // schema.table
	// MetaKey lists the primary key column names in key order: a JSON
	// array of strings (KeyMetadata, PrimaryKey), so a quoted name holding
	// a comma or edge spaces travels whole.
	MetaKey = "sluice.key"
	// MetaPrimaryKey is the same key comma-joined: the only form before
	// MetaKey, still written beside it for builds that read only it, and
	// read (split at commas) only from a schema without MetaKey.
	MetaPrimaryKey = "sluice.primary_key"
	MetaRouting    = "sluice.routing" // routing column name
)

// Field-level Arrow metadata keys.
const (
	MetaPgType = "sluice.pgtype" // Postgres type name (format_type), e.g. "numeric(40,20)", "text[]"
	MetaKind   = "sluice.kind"   // the contract's type kind, see types.go
)
