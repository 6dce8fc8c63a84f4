package chdb

import (
	"errors"
	"regexp"
	"strconv"
)

var (
	// ErrLibchdb: libchdb.so could not be found or loaded.
	ErrLibchdb = errors.New("libchdb unavailable")
	// ErrClosed: the connection was closed.
	ErrClosed = errors.New("catalog connection closed")
	// ErrEngineInUse: the process already runs a chDB engine on another
	// directory (libchdb holds one engine per process).
	ErrEngineInUse = errors.New("chdb engine already open on another directory")
)

// Exception is an error the ClickHouse engine reported, with its numeric code
// (e.g. 60 UNKNOWN_TABLE) when the message carries one. Both backends return
// it; use errors.As.
type Exception struct {
	Code    int
	Message string
}

func (e *Exception) Error() string { return e.Message }

var codeRe = regexp.MustCompile(`Code: (\d+)\.`)

// newException builds an Exception from an engine message, parsing its code.
func newException(msg string) *Exception {
	e := &Exception{Message: msg}
	if m := codeRe.FindStringSubmatch(msg); m != nil {
		e.Code, _ = strconv.Atoi(m[1])
	}
	return e
}
