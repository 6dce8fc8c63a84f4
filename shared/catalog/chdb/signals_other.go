//go:build !(linux && amd64)

package chdb

import "sync/atomic"

// libchdb is only published for linux/amd64; elsewhere there is nothing to
// restore.
var restoreSignals atomic.Bool

func restoreGoSignalHandlers() {}

func firstQueryDone() {}
