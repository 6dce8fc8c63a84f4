package catalog

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// quote renders s as a ClickHouse single-quoted string literal (the one
// implementation lives with the pack store, whose table functions need it).
func quote(s string) string { return packstore.QuoteString(s) }

// ident renders name as a backquoted ClickHouse identifier.
func ident(name string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(name) + "`"
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
func i64(v int64) string  { return strconv.FormatInt(v, 10) }

// The columns a rows table holds beside its source table's, and every name
// a statement over a rows table introduces (aliases, subquery columns), are
// under proto.SystemPrefix, which no source column may use (the reader
// refuses one): so no source column name can collide with the catalog's
// own (docs/adr/0044-reserved-catalog-names.md). The system columns of a
// pack (proto.ColLSN ...) keep their names; these are the catalog's
// additions.
const (
	rowDest  = proto.ColDestination // the destination of the row
	rowStore = "_sluice_store_id"   // pack identity: the store ...
	rowPack  = "_sluice_pack_id"    // ... and the pack or segment id
)

// rowPackID is the rows table's pack identity, (store, pack), as an SQL
// tuple; rowMember adds the destination (a member).
var (
	rowPackID = "(" + ident(rowStore) + ", " + ident(rowPack) + ")"
	rowMember = "(" + ident(rowStore) + ", " + ident(rowPack) + ", " + ident(rowDest) + ")"
)

// names are the catalog's object names for one prefix.
type names struct {
	prefix string
}

func (n names) stamp() string     { return n.prefix + "_schema_version" }
func (n names) tables() string    { return n.prefix + "_tables" }
func (n names) packs() string     { return n.prefix + "_packs" }
func (n names) watermark() string { return n.prefix + "_watermark" }
func (n names) lease() string     { return n.prefix + "_publisher_lease" }
func (n names) snapshots() string { return n.prefix + "_snapshots" }
func (n names) retention() string { return n.prefix + "_retention" }
func (n names) pins() string      { return n.prefix + "_snapshot_pins" }
func (n names) purges() string    { return n.prefix + "_purges" }

// versionFloor holds the highest version a catalog of this prefix ever
// published, recorded by Rebuild before it drops anything; no drop removes
// it, so versions never repeat across rebuilds (rebuild.go).
func (n names) versionFloor() string { return n.prefix + "_version_floor" }

// rows is the rows table of a captured table (schema.table), its first
// generation.
func (n names) rows(table string) string { return n.prefix + "_rows." + table }

// rowsGen is the rows table of one generation of a captured table: the
// first is rows(table), a later one rows(table)@<generation> (a table name
// never holds @, proto.ValidateTable).
func (n names) rowsGen(table string, gen int) string {
	if gen <= 1 {
		return n.rows(table)
	}
	return n.rows(table) + "@" + strconv.Itoa(gen)
}

// latest is the view of a captured table as of the latest snapshot.
func (n names) latest(table string) string { return n.prefix + "_latest." + table }

// fixedTables are the tables every catalog of this schema version holds,
// in creation order (the stamp is created first but written last).
func (n names) fixedTables() []string {
	return []string{n.stamp(), n.tables(), n.packs(), n.watermark(), n.lease(), n.retention(), n.pins()}
}

// chScalar is the catalog storage type of a scalar kind.
func chScalar(k proto.Kind) string {
	switch k {
	case proto.KindInt16:
		return "Int16"
	case proto.KindInt32:
		return "Int32"
	case proto.KindInt64, proto.KindTimestamp, proto.KindTimestampTZ:
		return "Int64"
	case proto.KindDate:
		return "Int32"
	case proto.KindFloat32:
		return "Float32"
	case proto.KindFloat64:
		return "Float64"
	case proto.KindBool:
		return "Bool"
	}
	return "String"
}

// chStorage is the rows-table column type of a kind.
func chStorage(k proto.Kind, key bool) string {
	if e, ok := k.Elem(); ok {
		return "Array(Nullable(" + chScalar(e) + "))"
	}
	if key {
		return chScalar(k)
	}
	return "Nullable(" + chScalar(k) + ")"
}

// chReadScalar is how a pack column of a scalar kind is read from the Arrow
// file (the file() structure argument).
func chReadScalar(k proto.Kind) string {
	switch k {
	case proto.KindTimestamp, proto.KindTimestampTZ:
		return "DateTime64(6, 'UTC')"
	}
	return chScalar(k)
}

func chRead(k proto.Kind, nullable bool) string {
	if e, ok := k.Elem(); ok {
		return "Array(Nullable(" + chReadScalar(e) + "))"
	}
	if nullable {
		return "Nullable(" + chReadScalar(k) + ")"
	}
	return chReadScalar(k)
}

// selectExpr converts a pack column as read into its storage form.
func selectExpr(col string, k proto.Kind, nullable, key bool) string {
	c := ident(col)
	if e, ok := k.Elem(); ok {
		if e == proto.KindTimestamp || e == proto.KindTimestampTZ {
			return "arrayMap(x -> toUnixTimestamp64Micro(x), " + c + ")"
		}
		return c
	}
	if key && nullable {
		c = "assumeNotNull(" + c + ")"
	}
	if k == proto.KindTimestamp || k == proto.KindTimestampTZ {
		return "toUnixTimestamp64Micro(" + c + ")"
	}
	return c
}

// toastable reports whether Postgres may store a value of this kind out of
// line (TOAST), so that an UPDATE can leave it "unchanged". Fixed-width
// types never are.
func toastable(k proto.Kind) bool {
	if _, ok := k.Elem(); ok {
		return true
	}
	switch k {
	case proto.KindInt16, proto.KindInt32, proto.KindInt64, proto.KindFloat32, proto.KindFloat64,
		proto.KindBool, proto.KindTimestamp, proto.KindTimestampTZ, proto.KindDate, proto.KindUUID:
		return false
	}
	return true
}

// withStructure appends a structure argument to a table function call that
// ends with its format argument, e.g. file('/p', 'Arrow') -> file('/p',
// 'Arrow', 'a Int64, ...'). Store.TableFunction implementations must end
// with the format so that this holds for file(), s3() and url().
func withStructure(tf, structure string) (string, error) {
	tf = strings.TrimSpace(tf)
	if !strings.HasSuffix(tf, ")") {
		return "", fmt.Errorf("table function %q does not end with ')'", tf)
	}
	return tf[:len(tf)-1] + ", " + quote(structure) + ")", nil
}

// leaseRowsKept bounds the in-memory lease table (renewals, acquisitions
// and version claims: one row per publish attempt, one per renewal) to its
// newest rows, the head among them. Every read of the table scans it, and an
// in-memory table keeps each one-row insert as its own block (measured on
// chDB: about 10 µs per block per read), so the bound is small. What the
// protocol reads is recent: the head, the rows of a contested term, and the
// claims of a version during one publish attempt (tens of milliseconds,
// while one publisher appends about one row a second). A row evicted early
// can only make a fence fail (its claim is gone), never pass.
const leaseRowsKept = 64
