//go:build sluice_unsafe

package reader

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestUnsafeSwitchesRead: under the sluice_unsafe tag each switch turns its
// rule off and logs the WARN line naming its variable, which the end-to-end
// negative controls look for (test/e2e readerloss_test.go). Unset, every
// rule stays on. Run by `make test` with -tags sluice_unsafe.
func TestUnsafeSwitchesRead(t *testing.T) {
	var log bytes.Buffer
	l := slog.New(slog.NewTextHandler(&log, nil))
	t.Setenv(unsafeScalarMaxEnv, "")
	t.Setenv(unsafeUnchainedEnv, "")
	if r := unsafeRules(l); r != (rules{}) || log.Len() > 0 {
		t.Fatalf("switches unset: rules %+v, log %q", r, log.String())
	}
	t.Setenv(unsafeNoReplayWaitEnv, "")
	t.Setenv(unsafeScalarMaxEnv, "1")
	t.Setenv(unsafeUnchainedEnv, "1")
	t.Setenv(unsafeNoReplayWaitEnv, "1")
	if r := unsafeRules(l); r != (rules{scalarMax: true, unchained: true, noReplayWait: true}) {
		t.Fatalf("switches set: rules %+v, want the three rules off", r)
	}
	for _, name := range []string{unsafeScalarMaxEnv, unsafeUnchainedEnv, unsafeNoReplayWaitEnv} {
		if !strings.Contains(log.String(), name+"=1") {
			t.Errorf("no WARN naming %s: %s", name, log.String())
		}
	}
}
