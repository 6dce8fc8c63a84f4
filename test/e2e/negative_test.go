package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/test/kit"
)

// The negative controls run the crash soak with one safety rule switched
// off through an environment switch the services read at start-up, and
// pass only when the oracle catches the damage. They are slow and, being
// about races, probabilistic: they run only with SLUICE_NEGATIVE=1
// (e.g. `SLUICE_NEGATIVE=1 SLUICE_SOAK_DURATION=2m go test -tags sluice_unsafe -run Negative
// ./test/e2e/`), and skip when the service does not acknowledge the switch
// in its log (the hook is not wired).
//
// Hooks (services/*; each logs one WARN line naming the variable when it
// is set, which is how these tests know the hook is live):
//   - SLUICE_UNSAFE_SCALAR_MAX_LSN=1: reader.New sets r.rules.scalarMax (the
//     reader confirms max(acked through) instead of the prefix-complete
//     LSN); SLUICE_UNSAFE_UNCHAINED=1 switches the publish chain off.
//     Used by TestNegativeReaderScalarMaxLSN (readerloss_test.go).
//   - SLUICE_UNSAFE_SCALAR_MAX_CURSOR=1 and SLUICE_UNSAFE_DROP_REDELIVERED=1:
//     flusher.New (services/flusher unsafe.go, built only with the tag)
//     sets the manager's scalarMaxCursor and dropRedelivered
//     (a cursor ahead of pending messages only loses data when redelivered
//     messages at or below it are dropped; with dropRedelivered off the
//     flusher never reads its cursor on the data path).
func negative(t *testing.T, m mode, natsShare float64, env ...string) {
	if os.Getenv("SLUICE_NEGATIVE") == "" {
		t.Skip("negative control: set SLUICE_NEGATIVE=1 to run it")
	}
	rep, cs, p := soak(t, m, func(c *kit.Chaos) {
		c.NATSShare = natsShare
		c.Every = 3 * time.Second
	}, env...)
	name, _, _ := strings.Cut(env[0], "=")
	seen := false
	for _, proc := range p.Services() {
		if len(proc.Grep(name)) > 0 {
			seen = true
		}
	}
	if !seen {
		t.Skipf("no service logged %s: the hook is not wired (see the proposal above)", name)
	}
	t.Logf("with %v: %s after %s", env, rep, cs)
	if rep.OK() {
		t.Errorf("with %v the oracle found nothing: the negative control did not bite (%s)", env, cs)
	}
}

// TestNegativeReaderScalarMaxLSN (rule 2) is not a soak: broker restarts
// never lose one publish while storing later ones, so it drives that exact
// fault through kit.FaultProxy; see readerloss_test.go.

// TestNegativeFlusherScalarMaxCursor: the flusher's cursor is max(flushed)
// instead of prefix-complete, and redelivered messages at or below the
// cursor are dropped: a message nak'd by a failed flush or left unacked by
// a killed flusher is dropped on redelivery.
//
// The loss needs a message delivered after a later position of its
// destination was flushed (two router workers finishing batches out of
// order), still buffered when its flusher is killed. Many router workers
// and small reader batches make that common enough to catch in a minute.
func TestNegativeFlusherScalarMaxCursor(t *testing.T) {
	negative(t, multiProcess, 0.1, "SLUICE_UNSAFE_SCALAR_MAX_CURSOR=1", "SLUICE_UNSAFE_DROP_REDELIVERED=1",
		"SLUICE_ROUTER_WORKERS=8", "SLUICE_READER_BATCH_ROWS=20", "SLUICE_READER_BATCH_INTERVAL=10ms")
}
