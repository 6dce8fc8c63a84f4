//go:build !sluice_unsafe

package flusher

import (
	"bytes"
	"log/slog"
	"testing"
)

// TestProductionBuildIgnoresUnsafeSwitches: a build without the
// sluice_unsafe tag keeps every rule on whatever the environment says, and
// says nothing about the switches. Its twin under the tag
// (TestUnsafeSwitchesRead, unsafe_test.go) is the control that the same
// environment does switch the rules off there.
func TestProductionBuildIgnoresUnsafeSwitches(t *testing.T) {
	t.Setenv("SLUICE_UNSAFE_SCALAR_MAX_CURSOR", "1")
	t.Setenv("SLUICE_UNSAFE_DROP_REDELIVERED", "1")
	var log bytes.Buffer
	if r := unsafeRules(slog.New(slog.NewTextHandler(&log, nil))); r != (rules{}) {
		t.Fatalf("rules %+v in a production build, want every rule on", r)
	}
	if log.Len() > 0 {
		t.Fatalf("a production build logged about the switches: %s", log.String())
	}
}
