package catalog

import (
	"errors"
	"fmt"
)

var (
	// ErrSchemaRefused is returned by EnsureSchema for a catalog this build
	// will not open; the message names what was found and how to rebuild.
	ErrSchemaRefused = errors.New("catalog schema refused")
	// ErrLeaseHeld is returned by AcquireLease while another holder's lease
	// is live.
	ErrLeaseHeld = errors.New("publisher lease held by another publisher")
	// ErrLeaseLost is returned when the caller's publisher lease is no longer
	// the live head: it must stop publishing and acquire again.
	ErrLeaseLost = errors.New("publisher lease lost")
	// ErrVersionRace is returned when a publish lost its version to another
	// writer; nothing it wrote is visible and it may retry at a higher one.
	ErrVersionRace = errors.New("snapshot version lost to another publish")
	// ErrPublishConflict is returned when a publish landed beside a foreign
	// publish at the same version: the version's contents are the union of
	// both. It is not retryable; an operator must look.
	ErrPublishConflict = errors.New("snapshot version published twice")
	// ErrNoSnapshot is returned for a version that was never published, or
	// by Latest before the first publish.
	ErrNoSnapshot = errors.New("no such published snapshot")
	// ErrRebuiltPast is returned (with ErrNoSnapshot) for a version
	// published before the catalog was rebuilt: the rebuilt catalog never
	// reuses it.
	ErrRebuiltPast = errors.New("snapshot version predates a catalog rebuild")
	// ErrNotMember is returned by PublishReplace for a member to remove
	// that the latest snapshot does not hold.
	ErrNotMember = errors.New("not a member of the latest snapshot")
	// ErrUnknownTable is returned for a table the catalog has never indexed.
	ErrUnknownTable = errors.New("table not in catalog")
	// ErrBadCursor is returned for a page cursor this catalog did not issue.
	ErrBadCursor = errors.New("invalid page cursor")
	// ErrBadSchema marks a pack schema the catalog cannot hold (no kind on a
	// column, no primary key, a reserved name). It is permanent for the pack.
	ErrBadSchema = errors.New("pack schema not indexable")
)

// ErrPackMismatch marks a pack whose footer disagrees with where it was
// found (its path) or with the event that announced it: another
// destination, table or id. It is refused for tenant isolation.
var ErrPackMismatch = errors.New("pack footer disagrees with its path or event")

// TableRefusedError is returned by Register (and so by Index) when a
// table's schema cannot be held however often it is tried: the engine
// refused the rows table's CREATE or ALTER (a column name it reserves, a
// change it cannot apply: refusedByEngine), or a column the rows table
// already holds in another type. It is the table's (and schema's) own
// fault, never the catalog's: it wraps ErrBadSchema, so the indexer
// dead-letters the schema's packs, halting their destinations with this
// reason (docs/adr/0034-corrupt-pack-halts.md), and keeps indexing every
// other table (docs/adr/0044-reserved-catalog-names.md).
type TableRefusedError struct {
	Table       string // schema.table
	Fingerprint string // the refused schema's
	Err         error  // the engine's refusal
}

func (e *TableRefusedError) Error() string {
	return fmt.Sprintf("%v: table %s (schema %s) cannot be held by the catalog: %v", ErrBadSchema, e.Table, e.Fingerprint, e.Err)
}

// Unwrap gives ErrBadSchema and the engine's refusal.
func (e *TableRefusedError) Unwrap() []error { return []error{ErrBadSchema, e.Err} }
