package pgtypes

import "errors"

// Sentinel errors. Every error the package returns wraps one of them, so
// callers classify with errors.Is.
var (
	// ErrSyntax: the text is not the Postgres text output form of the kind.
	ErrSyntax = errors.New("pgtypes: malformed text value")
	// ErrOutOfRange: the value is well formed but cannot be held by the
	// kind's Arrow type (an integer overflow, a timestamp beyond the int64
	// microsecond range, a value beyond Arrow's 2 GiB per-array limit).
	ErrOutOfRange = errors.New("pgtypes: value out of range")
	// ErrMultiDim: a multi-dimensional array literal for a one-dimensional
	// array kind. Multi-dimensional columns resolve to proto.KindToJSONB (see
	// ResolveColumn); a column declared one-dimensional can still hold a
	// multi-dimensional value, because Postgres does not enforce dimensions.
	ErrMultiDim = errors.New("pgtypes: multi-dimensional array in a one-dimensional array kind")
	// ErrKind: the kind is not one of proto's kinds.
	ErrKind = errors.New("pgtypes: unknown kind")
	// ErrBuilder: the builder or array does not match the kind's Arrow type.
	ErrBuilder = errors.New("pgtypes: builder or array does not match kind")
	// ErrValue: a Go value handed to AppendJSON does not fit the kind.
	ErrValue = errors.New("pgtypes: value does not fit kind")
)
