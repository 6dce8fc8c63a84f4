package model

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
)

// tiny is Small without the crash: the protocol's full exploration in
// seconds (make model explores Small itself).
func tiny() Config {
	c := Small()
	c.Name, c.Crashes = "tiny", 0
	return c
}

func TestProtocolHolds(t *testing.T) {
	for _, c := range []Config{tiny(), tinySlices()} {
		r := Check(c)
		if r.Violation != "" || r.Truncated {
			t.Fatalf("%s: violation %q (truncated %v):\n%s", c.Name, r.Violation, r.Truncated, strings.Join(r.Trace, "\n"))
		}
		t.Logf("%s: %d distinct states, depth %d, %s", c.Name, r.States, r.Depth, r.Elapsed)
	}
}

// tinySlices is Slices without the crash and the lease expiry: a partition
// message of two destinations, flushed in every interleaving, with a
// failed flush and a second replica.
func tinySlices() Config {
	c := Slices()
	c.Name, c.Crashes, c.LeaseExpiries = "tiny slices", 0, 0
	return c
}

// Every mutant is caught with a counterexample in the configuration make
// model explores (each within a few thousand states).
func TestMutantsCaught(t *testing.T) {
	for _, m := range Mutants {
		t.Run(m.Name, func(t *testing.T) {
			c := Small()
			if m.In == "slices" {
				c = Slices()
			}
			c.Mutant = m.Mutant
			r := Check(c)
			if r.Violation == "" {
				t.Fatalf("not caught in %d states", r.States)
			}
			if len(r.Trace) < 2 || !strings.Contains(strings.Join(r.Trace, "\n"), "VIOLATION: "+r.Violation) {
				t.Fatalf("no readable trace ending at the violation:\n%s", strings.Join(r.Trace, "\n"))
			}
		})
	}
}

// Keeping the live buffer after a failed flush is not a defect by itself
// here: unlike Viaduck, which rewound its read position to the cursor,
// sluice keeps every nak'd message's span pending, so the cursor cannot
// pass it. Only with the spans forgotten (Mutants) does it lose.
func TestKeepLiveAloneHolds(t *testing.T) {
	c := tiny()
	c.Mutant = core.KeepLiveOnFailure
	if r := Check(c); r.Violation != "" {
		t.Fatalf("violation %q:\n%s", r.Violation, strings.Join(r.Trace, "\n"))
	}
}

// The negative control of the fetch deadline: a replica whose lease
// expired unnoticed goes on fetching (NoFetchDeadline), and the new owner
// settles without waiting out the old owner's open fetch, so a message can
// be pending at the zombie while the new owner's cursor passes it. Nothing
// is lost (it redelivers and is flushed again), but the cursor is not
// prefix-complete until then. With the rule on, the same configuration,
// zombie fetcher included, holds (TestProtocolHolds).
func TestZombieFetchPassesCursor(t *testing.T) {
	c := tiny()
	c.Mutant = core.NoFetchDeadline
	r := Check(c)
	if !strings.HasPrefix(r.Violation, "cursor not prefix-complete") {
		t.Fatalf("got violation %q, want the zombie-fetch gap", r.Violation)
	}
	t.Logf("%s\n%s", r.Violation, strings.Join(r.Trace, "\n"))
}
