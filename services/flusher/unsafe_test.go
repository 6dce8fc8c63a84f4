//go:build sluice_unsafe

package flusher

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestUnsafeSwitchesRead: under the sluice_unsafe tag the switches turn
// their rules off and log the WARN line naming the first, which the
// end-to-end negative control looks for (test/e2e negative_test.go). Unset,
// every rule stays on; the second alone switches nothing. Run by
// `make test` with -tags sluice_unsafe.
func TestUnsafeSwitchesRead(t *testing.T) {
	var log bytes.Buffer
	l := slog.New(slog.NewTextHandler(&log, nil))
	t.Setenv(unsafeScalarMaxCursorEnv, "")
	t.Setenv(unsafeDropRedeliveredEnv, "1")
	if r := unsafeRules(l); r != (rules{}) || log.Len() > 0 {
		t.Fatalf("first switch unset: rules %+v, log %q", r, log.String())
	}
	t.Setenv(unsafeScalarMaxCursorEnv, "1")
	if r := unsafeRules(l); r != (rules{scalarMaxCursor: true, dropRedelivered: true}) {
		t.Fatalf("switches set: rules %+v, want both rules off", r)
	}
	if !strings.Contains(log.String(), unsafeScalarMaxCursorEnv+"=1") {
		t.Errorf("no WARN naming %s: %s", unsafeScalarMaxCursorEnv, log.String())
	}
}
