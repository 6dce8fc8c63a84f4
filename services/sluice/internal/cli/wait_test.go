package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
)

// heldAtOrBelow's rules over the status document, for the halts a real
// pipeline cannot produce on demand in a unit test (a table halted at no
// known position, a halted destination); the served document stands in
// for the API. test/lifecycle TestWaitExitsTwoOnHaltedTable runs the real
// pipeline with a TRUNCATE-halted table.
func TestHeldAtOrBelow(t *testing.T) {
	const doc = `{"services":{
		"reader":{"halted_tables":{"public.a":"TRUNCATE","public.b":"type changed","public.gone":"dropped"},
			"halted_at_lsn":{"public.a":"0/100","public.b":"0/300"}},
		"flusher":{"destinations":[
			{"destination":"d1","state":"halted","cursor":"0/150:2","last_error":"bad pack"},
			{"destination":"d2","state":"halted","cursor":"0/250:0","last_error":"bad value"},
			{"destination":"d3","state":"lagging","cursor":"0/10:0"}]}}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/status" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(doc))
	}))
	defer srv.Close()
	c := &client{base: srv.URL, http: srv.Client()}
	for _, tc := range []struct {
		target string
		want   []string // a word of each line, in order
	}{
		// public.a is held from 0/100, public.gone at an unknown position,
		// d1's cursor is below 0/200; d2's is past it.
		{"0/200", []string{"public.a", "public.gone", "d1"}},
		// Below every halt: only the unknown position counts.
		{"0/50", []string{"public.gone"}},
		// d2's cursor (0/250:0) is below the end of 0/250's transaction.
		{"0/250", []string{"public.a", "public.gone", "d1", "d2"}},
		{"0/300", []string{"public.a", "public.b", "public.gone", "d1", "d2"}},
	} {
		target, err := proto.ParseLSN(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		held, err := heldAtOrBelow(t.Context(), c, target)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != len(tc.want) {
			t.Errorf("target %s: held %q, want lines naming %v", tc.target, held, tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(held[i], " "+w+" ") {
				t.Errorf("target %s: line %d is %q, want it to name %s", tc.target, i, held[i], w)
			}
		}
	}
}

// recoveringAtOrBelow: a halt a resync cleared holds `sluice wait` for an
// LSN at or above the halt until the snapshot is through the resync's end
// (the changes the halt dropped are only there); below the halt it holds
// nothing.
func TestRecoveringAtOrBelow(t *testing.T) {
	const doc = `{"services":{"reader":{"recovered_halts":{"public.a":{"halted_at_lsn":"0/100","end_lsn":"0/400"}}}}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(doc))
	}))
	defer srv.Close()
	c := &client{base: srv.URL, http: srv.Client()}
	for _, tc := range []struct {
		target, through string
		held            bool
	}{
		{"0/200", "0/300", true},  // through the target, not the resync's end
		{"0/200", "0/400", false}, // through the end
		{"0/50", "0/60", false},   // below the halt
	} {
		target, _ := proto.ParseLSN(tc.target)
		why := recoveringAtOrBelow(t.Context(), c, target, tc.through)
		if (why != "") != tc.held || (tc.held && !strings.Contains(why, "public.a")) {
			t.Errorf("target %s, snapshot through %s: %q, want held %v", tc.target, tc.through, why, tc.held)
		}
	}
}

// A resync that carries rows the stream does not (resync_holds) holds
// `sluice wait` for any target while it runs, after it failed (naming the
// command), and until a snapshot is through its end; then nothing. A
// streaming reader whose schema check is not yet through the target holds
// it too (a schema change with no row change after it is seen only there).
func TestResyncHoldsWait(t *testing.T) {
	for _, tc := range []struct {
		reader string
		held   bool
	}{
		{`{"state":"streaming","schema_checked_lsn":"0/5"}`, true},
		{`{"state":"streaming"}`, true},
		{`{"state":"streaming","schema_checked_lsn":"0/10"}`, false},
		{`{"state":"backfilling"}`, false}, // the check runs only while the reader streams
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"services":{"reader":` + tc.reader + `}}`))
		}))
		c := &client{base: srv.URL, http: srv.Client()}
		why := recoveringAtOrBelow(t.Context(), c, 0x10, "0/900")
		srv.Close()
		if (why != "") != tc.held {
			t.Errorf("reader %s: %q, want held %v", tc.reader, why, tc.held)
		}
	}
	for _, tc := range []struct {
		hold, through string
		want          string // "" when not held
	}{
		{`{"resync_id":3,"reason":"schema_change: column_default"}`, "0/900", "is being resynced (resync 3"},
		{`{"resync_id":3,"reason":"schema_change: column_default","error":"boom"}`, "0/900", "sluice resync --table public.a"},
		{`{"resync_id":3,"reason":"added","end_lsn":"0/400"}`, "0/300", "its rows are in snapshots through 0/400"},
		{`{"resync_id":3,"reason":"added","end_lsn":"0/400"}`, "0/400", ""},
	} {
		doc := `{"services":{"reader":{"state":"streaming","schema_checked_lsn":"0/20","resync_holds":{"public.a":` + tc.hold + `}}}}`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(doc))
		}))
		c := &client{base: srv.URL, http: srv.Client()}
		target, _ := proto.ParseLSN("0/10") // below everything: a hold counts for every LSN
		why := recoveringAtOrBelow(t.Context(), c, target, tc.through)
		srv.Close()
		if (why == "") != (tc.want == "") || !strings.Contains(why, tc.want) {
			t.Errorf("hold %s, snapshot through %s: %q, want %q", tc.hold, tc.through, why, tc.want)
		}
	}
}
