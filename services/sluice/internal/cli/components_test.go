package cli

import (
	"testing"

	"github.com/sluice-cdc/sluice/shared/stack"
)

// TestSpecsAreTheBinaries: every service `sluice run` knows is assembled
// from its package's Spec (the one its binary runs), under its own name,
// and the process needs are the union of the services' own.
func TestSpecsAreTheBinaries(t *testing.T) {
	if len(specs) != len(serviceNames) {
		t.Fatalf("%d specs for %d services", len(specs), len(serviceNames))
	}
	for _, n := range serviceNames {
		s, ok := specs[n]
		if !ok || s.Name != n || s.Build == nil {
			t.Fatalf("service %s: spec %+v", n, s)
		}
	}
	ss, err := specsOf(serviceNames)
	if err != nil {
		t.Fatal(err)
	}
	if got := stack.NeedsOf(ss...); got != (stack.Needs{State: true, Catalog: true, Packs: true}) {
		t.Fatalf("sluice dev needs %+v", got)
	}
	if _, err := specsOf([]string{"nope"}); err == nil {
		t.Fatal("unknown service accepted")
	}
	// The flusher's memory limit is set wherever it runs alone: its binary
	// and `sluice run flusher` share this hook.
	if specs["flusher"].Alone == nil {
		t.Fatal("the flusher has no alone-in-process settings: the memory limit would be set by its binary only")
	}
}
