package state

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// Every transition, from every state, through Set: allowed ones return the
// previous state, refused ones ErrTransition (ErrRetired out of Retired,
// with the gap in the message) and leave the row alone.
func TestDestinationTransitions(t *testing.T) {
	pool, _, _ := migrated(t)
	ds := NewDestinationStates(pool, schema)
	ctx := context.Background()
	all := []DestinationState{Active, Paused, Draining, Drained, Retired}
	// reach puts a fresh destination into state s along allowed edges.
	reach := map[DestinationState][]DestinationState{
		Active: nil, Paused: {Paused}, Draining: {Draining}, Drained: {Draining, Drained}, Retired: {Retired},
	}
	want := map[[2]DestinationState]bool{}
	for _, e := range [][2]DestinationState{
		{Active, Active}, {Active, Paused}, {Active, Draining}, {Active, Retired},
		{Paused, Paused}, {Paused, Active}, {Paused, Draining}, {Paused, Retired},
		{Draining, Draining}, {Draining, Active}, {Draining, Drained}, {Draining, Retired},
		{Drained, Drained}, {Drained, Active}, {Drained, Draining}, {Drained, Retired},
		{Retired, Retired},
	} {
		want[e] = true
	}
	n := 0
	for _, from := range all {
		for _, to := range all {
			n++
			name := "t" + string(from) + "_" + string(to)
			t.Run(string(from)+"->"+string(to), func(t *testing.T) {
				for _, s := range reach[from] {
					if _, err := ds.Set(ctx, name, s, "setup"); err != nil {
						t.Fatal(err)
					}
				}
				prev, err := ds.Set(ctx, name, to, "why")
				if want[[2]DestinationState{from, to}] {
					if err != nil || prev != from {
						t.Fatalf("Set = %q, %v; want %q, nil", prev, err, from)
					}
					return
				}
				if !errors.Is(err, ErrTransition) || !IsRefused(err) {
					t.Fatalf("Set = %v; want ErrTransition", err)
				}
				if from == Retired && (!errors.Is(err, ErrRetired) || !strings.Contains(err.Error(), "gap")) {
					t.Fatalf("refusal out of retired = %v; want ErrRetired naming the gap", err)
				}
				rows, _, err := ds.Load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if r.Destination == name && r.State != from {
						t.Fatalf("refused Set changed the state to %s", r.State)
					}
				}
			})
		}
	}
	if n != 25 {
		t.Fatal(n)
	}
	for _, bad := range []string{"", "a b", strings.Repeat("x", 300)} {
		if _, err := ds.Set(ctx, bad, Paused, ""); !errors.Is(err, ErrBadArgument) {
			t.Errorf("Set(%q) = %v, want ErrBadArgument", bad, err)
		}
	}
	if _, err := ds.Set(ctx, "ok", DestinationState("frozen"), ""); !errors.Is(err, ErrBadArgument) {
		t.Errorf("unknown state: %v", err)
	}
}

// Changes returns only rows written after a version, in version order; the
// cache applies them, drops resumed destinations and tells its listeners
// exactly what changed.
func TestDestinationChangesAndCache(t *testing.T) {
	pool, _, _ := migrated(t)
	ds := NewDestinationStates(pool, schema)
	ctx := context.Background()
	if _, err := ds.Set(ctx, "a", Paused, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.Set(ctx, "b", Retired, ""); err != nil {
		t.Fatal(err)
	}
	rows, v1, err := ds.Load(ctx)
	if err != nil || len(rows) != 2 || rows[0].Destination != "a" || rows[0].Reason != "maintenance" || rows[1].State != Retired {
		t.Fatalf("Load = %+v, %v", rows, err)
	}
	if rows, hi, err := ds.Changes(ctx, v1); err != nil || len(rows) != 0 || hi != v1 {
		t.Fatalf("Changes(latest) = %+v, %d, %v", rows, hi, err)
	}
	if _, err := ds.Set(ctx, "a", Active, ""); err != nil {
		t.Fatal(err)
	}
	rows, v2, err := ds.Changes(ctx, v1)
	if err != nil || len(rows) != 1 || rows[0].Destination != "a" || rows[0].State != Active || v2 <= v1 {
		t.Fatalf("Changes(v1) = %+v, %d, %v", rows, v2, err)
	}

	c := NewDestinationCache(ds, nil)
	var mu sync.Mutex
	var seen []map[string]DestinationState
	c.OnChange(func(ch map[string]DestinationState) { mu.Lock(); seen = append(seen, ch); mu.Unlock() })
	if c.Get("b") != Active || c.Loaded() {
		t.Fatal("an unloaded cache must answer active")
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Get("a") != Active || c.Get("b") != Retired || c.Get("zzz") != Active || !c.Loaded() {
		t.Fatalf("after load: a=%s b=%s", c.Get("a"), c.Get("b"))
	}
	if _, err := ds.Set(ctx, "a", Draining, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.Set(ctx, "a", Active, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil { // nothing changed: no callback
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0]["b"] != Retired || len(seen[0]) != 1 ||
		seen[1]["a"] != Draining || len(seen[1]) != 1 || seen[2]["a"] != Active || len(seen[2]) != 1 {
		t.Fatalf("callbacks %v", seen)
	}
	var nilCache *DestinationCache
	if nilCache.Get("x") != Active {
		t.Fatal("nil cache")
	}
}

// Concurrent writers never lose a change to a watcher: every write's
// version is above every version committed before it.
func TestDestinationConcurrentSetsSeenInOrder(t *testing.T) {
	pool, _, _ := migrated(t)
	ds := NewDestinationStates(pool, schema)
	ctx := context.Background()
	c := NewDestinationCache(ds, nil)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := "d" + string(rune('a'+i))
			for range 10 {
				if _, err := ds.Set(ctx, name, Paused, ""); err != nil {
					t.Error(err)
				}
				if _, err := ds.Set(ctx, name, Active, ""); err != nil {
					t.Error(err)
				}
				_ = c.Refresh(ctx)
			}
			if _, err := ds.Set(ctx, name, Paused, "last"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	c.polls = 1 // no full reload: the incremental path must have it all
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if s := c.Get("d" + string(rune('a'+i))); s != Paused {
			t.Fatalf("d%c = %s, want paused", 'a'+i, s)
		}
	}
}
