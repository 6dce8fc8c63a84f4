package reader

import (
	"testing"

	"github.com/sluice-cdc/sluice/shared/state"
)

// resyncHolds: a schema change's or an added table's resync starts a hold;
// it is settled by itself or a later resync of the whole table when done,
// not by a resync of one destination, not by an earlier one; a failure of
// its own resync shows; a later hold-reason resync replaces it; a table
// that never had one has none; load rebuilds the same from the queue.
func TestResyncHolds(t *testing.T) {
	v := "acme"
	reqs := []state.Resync{
		{ID: 1, Table: "public.a", Reason: "operator", State: state.ResyncDone, EndLSN: "0/50"}, // before any hold: none
		{ID: 2, Table: "public.a", Reason: "schema_change: column_default", State: state.ResyncQueued},
		{ID: 3, Table: "public.a", Reason: "operator", Destination: "acme", Value: &v, State: state.ResyncDone, EndLSN: "0/300"},
		{ID: 2, Table: "public.a", Reason: "schema_change: column_default", State: state.ResyncFailed, Error: "boom"},
		{ID: 4, Table: "public.b", Reason: "added", State: state.ResyncRunning},
		{ID: 5, Table: "public.b", Reason: "added", State: state.ResyncDone, EndLSN: "0/100"}, // a newer hold
		{ID: 4, Table: "public.b", Reason: "added", State: state.ResyncDone, EndLSN: "0/90"},  // older: ignored
	}
	var h resyncHolds
	for _, r := range reqs {
		h.note(r)
	}
	got := h.snapshot()
	want := map[string]ResyncHold{
		"public.a": {ResyncID: 2, Reason: "schema_change: column_default", Error: "boom"},
		"public.b": {ResyncID: 5, Reason: "added", EndLSN: "0/100"},
	}
	if len(got) != len(want) || got["public.a"] != want["public.a"] || got["public.b"] != want["public.b"] {
		t.Fatalf("holds %+v, want %+v", got, want)
	}
	// An operator's resync of the whole table after the failure settles it.
	h.note(state.Resync{ID: 6, Table: "public.a", Reason: "operator", State: state.ResyncDone, EndLSN: "0/400"})
	if a := h.snapshot()["public.a"]; a.EndLSN != "0/400" || a.Error != "" || a.ResyncID != 2 {
		t.Fatalf("after a later whole-table resync: %+v", a)
	}

	// The queue, newest first, as List returns it: the same holds, and
	// nothing for a table no longer configured.
	queue := []state.Resync{
		{ID: 7, Table: "public.gone", Reason: "added", State: state.ResyncQueued},
		{ID: 6, Table: "public.a", Reason: "operator", State: state.ResyncDone, EndLSN: "0/400"},
		{ID: 5, Table: "public.b", Reason: "added", State: state.ResyncDone, EndLSN: "0/100"},
		{ID: 4, Table: "public.b", Reason: "added", State: state.ResyncDone, EndLSN: "0/90"},
		{ID: 2, Table: "public.a", Reason: "schema_change: column_default", State: state.ResyncFailed, Error: "boom"},
	}
	var l resyncHolds
	l.load(queue, map[string]bool{"public.a": true, "public.b": true})
	lg := l.snapshot()
	if len(lg) != 2 || lg["public.a"] != (ResyncHold{ResyncID: 2, Reason: "schema_change: column_default", EndLSN: "0/400"}) || lg["public.b"] != want["public.b"] {
		t.Fatalf("loaded %+v", lg)
	}
}
