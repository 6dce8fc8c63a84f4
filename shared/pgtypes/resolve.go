package pgtypes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sluice-cdc/sluice/proto"
)

// Querier is what Resolve needs from a connection: *pgx.Conn, *pgxpool.Pool
// and pgx.Tx all satisfy it. It must be a normal (not a replication-mode)
// connection to the source database.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// firstNormalOID is Postgres' FirstNormalObjectId: OIDs below it are fixed
// at initdb and mean the same type in every database of every cluster.
const firstNormalOID = 16384

// Built-in OIDs that pgx does not name.
const (
	int2vectorOID = 22
	oidvectorOID  = 30
)

var builtin = map[uint32]proto.Kind{
	pgtype.Int2OID:        proto.KindInt16,
	pgtype.Int4OID:        proto.KindInt32,
	pgtype.Int8OID:        proto.KindInt64,
	pgtype.NumericOID:     proto.KindNumeric,
	pgtype.Float4OID:      proto.KindFloat32,
	pgtype.Float8OID:      proto.KindFloat64,
	pgtype.BoolOID:        proto.KindBool,
	pgtype.TextOID:        proto.KindText,
	pgtype.VarcharOID:     proto.KindText,
	pgtype.BPCharOID:      proto.KindText,
	pgtype.UUIDOID:        proto.KindUUID,
	pgtype.TimestamptzOID: proto.KindTimestampTZ,
	pgtype.TimestampOID:   proto.KindTimestamp,
	pgtype.DateOID:        proto.KindDate,
	pgtype.TimeOID:        proto.KindTime,
	pgtype.TimetzOID:      proto.KindTime, // text form; AppendJSON writes its offset as to_jsonb does
	pgtype.IntervalOID:    proto.KindInterval,
	pgtype.JSONOID:        proto.KindJSON,
	pgtype.JSONBOID:       proto.KindJSONB,
	pgtype.ByteaOID:       proto.KindBytea,

	pgtype.Int2ArrayOID:        proto.ArrayKind(proto.KindInt16),
	pgtype.Int4ArrayOID:        proto.ArrayKind(proto.KindInt32),
	pgtype.Int8ArrayOID:        proto.ArrayKind(proto.KindInt64),
	pgtype.NumericArrayOID:     proto.ArrayKind(proto.KindNumeric),
	pgtype.Float4ArrayOID:      proto.ArrayKind(proto.KindFloat32),
	pgtype.Float8ArrayOID:      proto.ArrayKind(proto.KindFloat64),
	pgtype.BoolArrayOID:        proto.ArrayKind(proto.KindBool),
	pgtype.TextArrayOID:        proto.ArrayKind(proto.KindText),
	pgtype.VarcharArrayOID:     proto.ArrayKind(proto.KindText),
	pgtype.BPCharArrayOID:      proto.ArrayKind(proto.KindText),
	pgtype.UUIDArrayOID:        proto.ArrayKind(proto.KindUUID),
	pgtype.TimestamptzArrayOID: proto.ArrayKind(proto.KindTimestampTZ),
	pgtype.TimestampArrayOID:   proto.ArrayKind(proto.KindTimestamp),
	pgtype.DateArrayOID:        proto.ArrayKind(proto.KindDate),
	pgtype.TimeArrayOID:        proto.ArrayKind(proto.KindTime),
	pgtype.TimetzArrayOID:      proto.ArrayKind(proto.KindTime),
	pgtype.IntervalArrayOID:    proto.ArrayKind(proto.KindInterval),
	pgtype.JSONArrayOID:        proto.ArrayKind(proto.KindJSON),
	pgtype.JSONBArrayOID:       proto.ArrayKind(proto.KindJSONB),
	pgtype.ByteaArrayOID:       proto.ArrayKind(proto.KindBytea),
}

// KindForOID is the kind of a built-in type the contract names (and of its
// one-dimensional array), without a query. ok is false for every other OID:
// call Resolve for those (enums, domains, other types).
func KindForOID(oid uint32) (proto.Kind, bool) {
	k, ok := builtin[oid]
	return k, ok
}

type typeKey struct {
	oid    uint32
	typmod int32
}

type resolved struct {
	kind   proto.Kind
	pgType string
}

// builtinCache holds results for OIDs below FirstNormalObjectId only: they
// mean the same thing in every database, so one process-wide cache is safe.
// A user type's OID is per database (tests open many), so Resolve never
// caches those; a Resolver does, for one database.
var builtinCache sync.Map // typeKey -> resolved

// Resolve returns the kind a column of type oid (with typmod) travels as and
// its format_type(oid, typmod) text, e.g. "numeric(40,20)", "text[]",
// "public.mood". Enums -> KindEnum; domains -> their base type's kind;
// composite types, hstore, int2vector and oidvector -> KindToJSONB;
// arrays (typcategory 'A') -> ArrayKind(element kind), or KindToJSONB
// when the element kind is an array or KindToJSONB or the element type's
// array delimiter is not a comma (box); everything else -> KindOther. A
// KindToJSONB column's values are converted with ResolveShape's Shape.
// Built-in types are cached process-wide; use a Resolver to cache user
// types too.
func Resolve(ctx context.Context, q Querier, oid uint32, typmod int32) (proto.Kind, string, error) {
	key := typeKey{oid, typmod}
	if oid < firstNormalOID {
		if v, ok := builtinCache.Load(key); ok {
			r := v.(resolved)
			return r.kind, r.pgType, nil
		}
	}
	r, err := resolve(ctx, q, oid, typmod)
	if err != nil {
		return "", "", err
	}
	if oid < firstNormalOID {
		builtinCache.Store(key, r)
	}
	return r.kind, r.pgType, nil
}

// Resolver caches Resolve results for one source database, keyed by
// (oid, typmod). Safe for concurrent use. Call Forget after DDL that drops a
// type (its OID could be reused).
type Resolver struct {
	q      ShapeQuerier
	mu     sync.Mutex
	cache  map[typeKey]resolved
	shapes map[uint32]*Shape
}

// NewResolver returns a Resolver that queries q on a cache miss.
func NewResolver(q ShapeQuerier) *Resolver {
	return &Resolver{q: q, cache: make(map[typeKey]resolved), shapes: make(map[uint32]*Shape)}
}

// Shape is ResolveShape, cached.
func (r *Resolver) Shape(ctx context.Context, oid uint32) (*Shape, error) {
	r.mu.Lock()
	s, ok := r.shapes[oid]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := ResolveShape(ctx, r.q, oid)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.shapes[oid] = s
	r.mu.Unlock()
	return s, nil
}

// Resolve is the package-level Resolve, cached.
func (r *Resolver) Resolve(ctx context.Context, oid uint32, typmod int32) (proto.Kind, string, error) {
	key := typeKey{oid, typmod}
	r.mu.Lock()
	v, ok := r.cache[key]
	r.mu.Unlock()
	if ok {
		return v.kind, v.pgType, nil
	}
	kind, pgType, err := Resolve(ctx, r.q, oid, typmod)
	if err != nil {
		return "", "", err
	}
	r.mu.Lock()
	r.cache[key] = resolved{kind, pgType}
	r.mu.Unlock()
	return kind, pgType, nil
}

// Forget empties the cache.
func (r *Resolver) Forget() {
	r.mu.Lock()
	clear(r.cache)
	clear(r.shapes)
	r.mu.Unlock()
}

// maxTypeDepth bounds the domain/array chain walked for one type.
const maxTypeDepth = 16

const typeSQL = `SELECT t.typtype::text, t.typcategory::text, t.typelem::int8, t.typbasetype::int8, t.typtypmod,
       COALESCE(e.typdelim::text, ','), format_type($1::oid, $2::int4),
       COALESCE((SELECT p.proname::text FROM pg_catalog.pg_proc p WHERE p.oid = t.typinput), '')
FROM pg_catalog.pg_type t LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem
WHERE t.oid = $1::oid`

// hstoreInput is the input function that marks the hstore extension's type.
const hstoreInput = "hstore_in"

func resolve(ctx context.Context, q Querier, oid uint32, typmod int32) (resolved, error) {
	var pgType string
	kind := proto.KindOther
	cur, curMod := oid, typmod
	for depth := 0; ; depth++ {
		if depth >= maxTypeDepth {
			return resolved{}, fmt.Errorf("resolving type %d: domain chain deeper than %d", oid, maxTypeDepth)
		}
		var (
			typtype, category, delim string
			elem, base               int64
			baseMod                  int32
			name, input              string
		)
		err := q.QueryRow(ctx, typeSQL, cur, curMod).Scan(&typtype, &category, &elem, &base, &baseMod, &delim, &name, &input)
		if errors.Is(err, pgx.ErrNoRows) {
			// A type dropped since the relation was described: its values
			// still arrive as text.
			if pgType == "" {
				pgType = fmt.Sprintf("oid %d", oid)
			}
			return resolved{proto.KindOther, pgType}, nil
		}
		if err != nil {
			return resolved{}, fmt.Errorf("resolving type %d: %w", oid, err)
		}
		if depth == 0 {
			pgType = name
		}
		if k, ok := KindForOID(cur); ok {
			kind = k
			break
		}
		switch {
		case typtype == "e":
			kind = proto.KindEnum
		case typtype == "d":
			cur, curMod = uint32(base), baseMod
			continue
		case typtype == "c", typtype == "b" && input == hstoreInput,
			cur == int2vectorOID, cur == oidvectorOID:
			kind = proto.KindToJSONB
		case typtype == "b" && category == "A" && elem != 0:
			ek, _, err := Resolve(ctx, q, uint32(elem), curMod)
			if err != nil {
				return resolved{}, err
			}
			// A list of the element kind when each element reads back as
			// that kind does; otherwise the whole value as JSON (arrays of
			// composites, of hstore, of arrays; box[] with its ';').
			kind = proto.KindToJSONB
			if _, nested := ek.Elem(); !nested && ek != proto.KindToJSONB && delim == "," {
				kind = proto.ArrayKind(ek)
			}
		}
		break
	}
	return resolved{kind, pgType}, nil
}

const attSQL = `SELECT a.atttypid::int8, a.atttypmod, a.attndims FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1::oid AND a.attname = $2 AND NOT a.attisdropped`

// ResolveColumn resolves a table column: like Resolve for the column's type,
// except that a column declared with more than one array dimension
// (int[][]) travels as KindToJSONB (nested JSON arrays). relid is the table's OID
// (pgoutput's RelationMessage.RelationID).
func ResolveColumn(ctx context.Context, q Querier, relid uint32, column string) (proto.Kind, string, error) {
	var (
		oid    int64
		typmod int32
		ndims  int32
	)
	if err := q.QueryRow(ctx, attSQL, relid, column).Scan(&oid, &typmod, &ndims); err != nil {
		return "", "", fmt.Errorf("resolving column %q of relation %d: %w", column, relid, err)
	}
	kind, pgType, err := Resolve(ctx, q, uint32(oid), typmod)
	if err != nil {
		return "", "", err
	}
	if _, isArray := kind.Elem(); isArray && ndims > 1 {
		kind = proto.KindToJSONB
	}
	return kind, pgType, nil
}
