// Package pgtypes owns sluice's type mapping: which proto.Kind a Postgres
// column travels as (Resolve, KindForOID), how a value's Postgres text form
// becomes an Arrow value (NewBuilder, AppendText; for a KindToJSONB column
// first the JSON to_jsonb gives: ResolveShape, Shape.AppendJSON), how an
// Arrow value reads back as a normalized Go value (Value), and how a
// normalized value — from Arrow or from the catalog — renders as JSON equal
// to Postgres' to_jsonb (AppendJSON).
//
// It must never lose or alter a value the contract names, never panic on
// bad input (errors wrap the sentinels in errors.go), and never guess a kind
// from an Arrow type: the kind is always passed in.
//
// # Session settings the reader must set
//
// AppendText parses the text output form, so the replication connection
// (the walsender runs the output functions with its own session settings)
// must be opened with these run-time parameters:
//
//	DateStyle=ISO  TimeZone=UTC  IntervalStyle=postgres
//	bytea_output=hex  extra_float_digits=3
//
// (with pgx: config.RuntimeParams["DateStyle"] = "ISO", and so on).
// TimeZone is what makes timestamptz text carry "+00"; other offsets parse
// too. extra_float_digits >= 1 gives shortest exact floats on Postgres 12+.
//
// # Decisions
//
//   - timestamp/timestamptz 'infinity' and '-infinity' are the int64
//     sentinels TimestampInfinity (MaxInt64) and TimestampNegInfinity
//     (MinInt64); date's are DateInfinity (MaxInt32) and DateNegInfinity
//     (MinInt32). No finite value takes them. Every timestamp Postgres
//     accepts is carried exactly: the instants from 294247-01-10
//     04:00:54.775807 (MaxInt64 microseconds since 1970) to Postgres' end,
//     294276-12-31 23:59:59.999999, are folded onto MinInt64+1 on, below
//     4714-11-24 BC where no Postgres instant lies (foldMicros; rendered
//     back by AppendJSON; docs/adr/0038-timestamps-past-int64.md). A text
//     outside Postgres' range is ErrOutOfRange. Every Postgres date (4714-11-24
//     BC to 5874897-12-31) fits Date32. A Shape converts the text form
//     and has no range of its own.
//   - BC dates are proleptic Gregorian with astronomical years (1 BC = 0),
//     as Postgres computes them.
//   - time with time zone travels as KindTime (its text form, "12:34:56+05",
//     which is also what to_jsonb gives).
//   - An array written with explicit bounds ("[0:1]={1,2}") keeps its
//     elements and loses its bounds (to_jsonb drops them too). A
//     multi-dimensional value in an array kind is ErrMultiDim; a column
//     declared multi-dimensional resolves to KindToJSONB via ResolveColumn.
//   - Composite types, hstore, int2vector, oidvector, arrays whose element
//     delimiter is not a comma (box[]) and arrays whose elements are not a
//     list kind (composites, hstore, arrays of a domain over an array)
//     travel as KindToJSONB. The Shape follows to_jsonb's categories
//     (jsonb_categorize_type): numbers (as the numeric to_jsonb makes of
//     them), booleans, json/jsonb embedded, timestamps in ISO 8601 with
//     'T' and "+00:00", arrays and composites recursively, hstore as its
//     cast to json, every other type a string of its text form. Another
//     extension type with a cast to json (PostGIS geometry) is not known
//     and reads as its text form.
//   - real and double precision render with Postgres' digits (float.go),
//     which are not strconv's for values whose shortest decimal is a
//     rounding bound or halfway between two decimals.
//   - Value copies strings and bytes so they outlive the Arrow array.
//
// # Notes
//
// Measured (go test -run X -bench . -benchtime=200000x ./pgtypes/, 2 shared
// cores): AppendText int64 48 ns, int32 37 ns, float64 61 ns, text 130 ns,
// timestamptz 62 ns, numeric 100 ns, int[] 113 ns per value, all with 0
// allocations per value (builder growth amortized); AppendJSON timestamptz
// 55 ns. AppendJSON of a float is strconv's shortest digits plus one fixed-
// precision format (~100-150 ns); a value of magnitude 2^50 (2^21 for
// real) or more with an even mantissa adds an exact big-integer check
// (~1 µs), and the rare value whose digits differ from strconv's an exact
// search (~10 µs CPU). A Shape converts a three-field composite in ~0.8
// µs (load 12, 2 cores: go test -run '^$' -bench 'AppendJSON|Shape'
// -benchtime 200000x ./shared/pgtypes/).
//
// The package starts no goroutines and holds no state but the built-in type
// cache (bounded by the catalog's built-in types) and Resolver caches
// (bounded by the source schema's columns).
//
// KindOther renders as a JSON string of the text form, which is what
// to_jsonb gives for the types left in it (point, inet, ranges, money, ...).
package pgtypes
