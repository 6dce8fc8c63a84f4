package pgtypes

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// ShapeQuerier is a Querier that also runs queries of many rows (a
// composite type's attributes); *pgx.Conn and *pgxpool.Pool satisfy it.
type ShapeQuerier interface {
	Querier
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const shapeTypeSQL = `SELECT t.typtype::text, t.typcategory::text, t.typelem::int8, t.typbasetype::int8,
       t.typrelid::int8, COALESCE(e.typdelim::text, ','),
       COALESCE((SELECT p.proname::text FROM pg_catalog.pg_proc p WHERE p.oid = t.typinput), '')
FROM pg_catalog.pg_type t LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem
WHERE t.oid = $1::oid`

// record_out writes the attributes that are not dropped, in attnum order.
const shapeAttrSQL = `SELECT a.attname::text, a.atttypid::int8 FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`

// maxShapeTypes bounds the catalog lookups of one shape (a composite of
// composites of ...): Postgres forbids a composite that contains itself,
// so only a hostile catalog reaches it.
const maxShapeTypes = 1000

var (
	stringShape      = &Shape{form: formString}
	numberShape      = &Shape{form: formNumber}
	boolShape        = &Shape{form: formBool}
	timestampShape   = &Shape{form: formTimestamp}
	timestampTZShape = &Shape{form: formTimestampTZ}
	jsonShape        = &Shape{form: formJSON}
	hstoreShape      = &Shape{form: formHstore}
)

// builtinShapes are to_jsonb's categories for built-in types (domains are
// seen through before this lookup). date's text form is what to_jsonb
// writes, so it is a string.
var builtinShapes = map[uint32]*Shape{
	pgtype.Int2OID: numberShape, pgtype.Int4OID: numberShape, pgtype.Int8OID: numberShape,
	pgtype.Float4OID: numberShape, pgtype.Float8OID: numberShape, pgtype.NumericOID: numberShape,
	pgtype.BoolOID: boolShape, pgtype.TimestampOID: timestampShape, pgtype.TimestamptzOID: timestampTZShape,
	pgtype.JSONOID: jsonShape, pgtype.JSONBOID: jsonShape,
	int2vectorOID: {form: formVector, elem: numberShape},
	oidvectorOID:  {form: formVector, elem: stringShape},
}

// ResolveShape reads from the catalog how values of type oid become
// to_jsonb's JSON: domains to their base type, arrays to their element
// type and delimiter, composite types to their attributes (recursively),
// hstore to an object. A type that is gone reads as a string.
func ResolveShape(ctx context.Context, q ShapeQuerier, oid uint32) (*Shape, error) {
	budget := maxShapeTypes
	return shapeOf(ctx, q, oid, 0, &budget)
}

func shapeOf(ctx context.Context, q ShapeQuerier, oid uint32, depth int, budget *int) (*Shape, error) {
	if s, ok := builtinShapes[oid]; ok {
		return s, nil
	}
	if *budget--; *budget < 0 || depth > maxTypeDepth {
		return nil, fmt.Errorf("resolving the JSON shape of type %d: nested deeper than %d or more than %d types", oid, maxTypeDepth, maxShapeTypes)
	}
	var (
		typtype, category, delim, input string
		elem, base, relid               int64
	)
	err := q.QueryRow(ctx, shapeTypeSQL, oid).Scan(&typtype, &category, &elem, &base, &relid, &delim, &input)
	if errors.Is(err, pgx.ErrNoRows) {
		return stringShape, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolving the JSON shape of type %d: %w", oid, err)
	}
	switch {
	case typtype == "d":
		return shapeOf(ctx, q, uint32(base), depth+1, budget)
	case typtype == "b" && category == "A" && elem != 0:
		es, err := shapeOf(ctx, q, uint32(elem), depth+1, budget)
		if err != nil {
			return nil, err
		}
		if len(delim) != 1 {
			return nil, fmt.Errorf("resolving the JSON shape of type %d: element delimiter %q", oid, delim)
		}
		return &Shape{form: formArray, elem: es, delim: delim[0]}, nil
	case typtype == "c":
		return compositeShape(ctx, q, oid, uint32(relid), depth, budget)
	case typtype == "b" && input == hstoreInput:
		return hstoreShape, nil
	}
	return stringShape, nil
}

func compositeShape(ctx context.Context, q ShapeQuerier, oid, relid uint32, depth int, budget *int) (*Shape, error) {
	rows, err := q.Query(ctx, shapeAttrSQL, relid)
	if err != nil {
		return nil, fmt.Errorf("reading the attributes of type %d: %w", oid, err)
	}
	type attr struct {
		name string
		oid  int64
	}
	attrs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (attr, error) {
		var a attr
		err := r.Scan(&a.name, &a.oid)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the attributes of type %d: %w", oid, err)
	}
	s := &Shape{form: formComposite}
	for _, a := range attrs {
		as, err := shapeOf(ctx, q, uint32(a.oid), depth+1, budget)
		if err != nil {
			return nil, err
		}
		s.names = append(s.names, a.name)
		s.attrs = append(s.attrs, as)
	}
	return s, nil
}
