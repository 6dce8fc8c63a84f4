package catalog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// readRaw reads every page of dest's table at version as Read renders it,
// by id, with each row's position (LSN:seq) from a second read with the
// system columns.
func readRaw(t testing.TB, c *catalog.Catalog, dest string, version uint64) (rows map[int64]json.RawMessage, pos map[int64]string) {
	t.Helper()
	rows, pos = map[int64]json.RawMessage{}, map[int64]string{}
	for _, system := range []bool{false, true} {
		cur := ""
		for {
			p, err := c.Read(t.Context(), catalog.ReadRequest{Destination: dest, Table: catalogtest.Items.Name, Version: version, Cursor: cur, Limit: 1000, SystemColumns: system})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Rows {
				var m struct {
					ID  int64  `json:"id"`
					LSN string `json:"_sluice_lsn"`
					Seq uint64 `json:"_sluice_seq"`
				}
				if err := json.Unmarshal(r, &m); err != nil {
					t.Fatal(err)
				}
				if system {
					pos[m.ID] = m.LSN + ":" + fmt.Sprint(m.Seq)
				} else {
					rows[m.ID] = r
				}
			}
			if p.Next == "" {
				break
			}
			cur = p.Next
		}
	}
	return rows, pos
}

// allChanges reads every page of the changes of dest from v1 to v2.
func allChanges(t testing.TB, c *catalog.Catalog, dest string, v1, v2 uint64, limit int) (out []catalog.Change, pages []catalog.ChangesPage) {
	t.Helper()
	cur := ""
	for {
		p, err := c.Changes(t.Context(), catalog.ChangesRequest{Destination: dest, Table: catalogtest.Items.Name, From: v1, To: v2, Cursor: cur, Limit: limit})
		if err != nil {
			t.Fatalf("changes of %s from %d to %d: %v", dest, v1, v2, err)
		}
		out = append(out, p.Changes...)
		pages = append(pages, p)
		if p.Next == "" {
			return out, pages
		}
		cur = p.Next
	}
}

func changeID(t testing.TB, key json.RawMessage) int64 {
	var k struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(key, &k); err != nil {
		t.Fatalf("key %s: %v", key, err)
	}
	return k.ID
}

// changesOracle checks Changes from v1 to v2 against the difference of the
// two versions' reads.
func changesOracle(t *testing.T, c *catalog.Catalog, dest string, v1, v2 uint64, limit int) (candidates int, full bool) {
	t.Helper()
	was, _ := readRaw(t, c, dest, v1)
	is, pos := readRaw(t, c, dest, v2)
	var want []string
	var ids []int64
	for id := range was {
		ids = append(ids, id)
	}
	for id := range is {
		if _, ok := was[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		a, inA := was[id]
		b, inB := is[id]
		switch {
		case !inA:
			want = append(want, fmt.Sprintf("insert %d %s %s", id, pos[id], b))
		case !inB:
			want = append(want, fmt.Sprintf("delete %d old=%s", id, a))
		case !bytes.Equal(a, b):
			want = append(want, fmt.Sprintf("update %d %s %s old=%s", id, pos[id], b, a))
		}
	}
	changes, pages := allChanges(t, c, dest, v1, v2, limit)
	var got []string
	for _, ch := range changes {
		id := changeID(t, ch.Key)
		switch ch.Op {
		case catalog.ChangeInsert:
			got = append(got, fmt.Sprintf("insert %d %s %s", id, ch.Position, ch.Row))
		case catalog.ChangeDelete:
			got = append(got, fmt.Sprintf("delete %d old=%s", id, ch.Old))
		default:
			got = append(got, fmt.Sprintf("%s %d %s %s old=%s", ch.Op, id, ch.Position, ch.Row, ch.Old))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("changes of %s from %d to %d (pages of %d):\n got %q\nwant %q", dest, v1, v2, limit, got, want)
	}
	for _, p := range pages {
		candidates += p.Candidates
		full = full || p.Full
	}
	return candidates, full
}

// TestChangesOracle (issue 35): over random workloads of two destinations
// (inserts, updates with TOAST-unchanged columns, deletes, keys moving
// between the destinations, TRUNCATEs and resync clears, segments holding
// both, compaction), for random pairs of published versions Changes equals
// the difference of the two versions' reads, every page of it.
func TestChangesOracle(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 35))
			c := newCatalog(t, chtest.Conn(t))
			store := openStore(t, "s1")
			dests := []string{"shop1", "shop2"}
			live := map[string]map[int64]bool{"shop1": {}, "shop2": {}}
			var l catalog.Lease
			var versions []uint64
			seq := uint64(0)
			for step := range 16 {
				lsn := 100 + uint64(step)
				rows := map[string][]catalogtest.Row{}
				add := func(d string, r catalogtest.Row) {
					seq++
					r.LSN, r.Seq = lsn, seq
					rows[d] = append(rows[d], r)
				}
				for range 1 + rng.IntN(6) {
					d := dests[rng.IntN(2)]
					other := dests[0]
					if d == other {
						other = dests[1]
					}
					id := int64(1 + rng.IntN(16))
					switch p := rng.IntN(8); {
					case rng.IntN(30) == 0:
						// A TRUNCATE, or a resync's clear (its bound below
						// the rows after it).
						add(d, catalogtest.Clear(0, 0, map[string]any{"tenant": d}))
						clear(live[d])
					case !live[d][id]:
						add(d, catalogtest.Ins(0, 0, item(id, d, map[string]any{"name": fmt.Sprintf("n%d-%d", id, step)})))
						live[d][id] = true
					case p < 3:
						add(d, catalogtest.Upd(0, 0, item(id, d, map[string]any{"qty": int32(step), "big": nil}), "big"))
					case p < 5:
						add(d, catalogtest.Upd(0, 0, item(id, d, map[string]any{"name": fmt.Sprintf("u%d-%d", id, step)})))
					case p < 7:
						add(d, catalogtest.Del(0, 0, map[string]any{"id": id, "tenant": d}))
						delete(live[d], id)
					case !live[other][id]:
						// The key moves: its old identity's tombstone in d,
						// an insert in the other destination.
						add(d, catalogtest.Row{Op: proto.OpMoveOut, Values: map[string]any{"id": id, "tenant": d}})
						add(other, catalogtest.Ins(0, 0, item(id, other, map[string]any{"name": fmt.Sprintf("m%d-%d", id, step)})))
						delete(live[d], id)
						live[other][id] = true
					}
				}
				var metas []packstore.PackMeta
				if rng.IntN(3) == 0 && len(rows) == 2 {
					metas = append(metas, catalogtest.WriteSegment(t, store, catalogtest.Items, segID(step), []catalogtest.Part{
						{Destination: "shop1", Rows: rows["shop1"]}, {Destination: "shop2", Rows: rows["shop2"]}}))
				} else {
					for _, d := range dests {
						if len(rows[d]) > 0 {
							metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, d, fmt.Sprintf("p%d-%s", step, d), rows[d]))
						}
					}
				}
				index(t, c, store, metas...)
				versions = append(versions, lpublish(t, c, &l).Version)
				if step%5 == 4 {
					st, l2, err := c.Compact(t.Context(), l, lifeTTL, store, catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1, MaxBytes: 1 << 30}, "compact1")
					if err != nil {
						t.Fatal(err)
					}
					l = l2
					if st.Snapshot.Version != 0 {
						versions = append(versions, st.Snapshot.Version)
					}
				}
			}
			fulls, deltas := 0, 0
			for i := range 6 {
				a, b := versions[rng.IntN(len(versions))], versions[rng.IntN(len(versions))]
				if i == 0 {
					b = a // From == To: empty
				}
				if a > b {
					a, b = b, a
				}
				for _, d := range dests {
					_, full := changesOracle(t, c, d, a, b, 2+rng.IntN(6))
					if full {
						fulls++
					} else {
						deltas++
					}
				}
			}
			t.Logf("%d versions; %d pairs compared from the members between them, %d over every key (a clear between)", len(versions), deltas, fulls)
		})
	}
}

// TestChangesCost (issue 35): between two versions whose members differ by
// one pack changing one row of a 3,000-row table, Changes compares one
// candidate key, from a statement that names the new pack alone, and every
// statement yields to the pipeline and carries the read limits. Control:
// with a clear between the versions every key of both is a candidate (the
// fallback), and the answer is still exact.
func TestChangesCost(t *testing.T) {
	rec := &recordingConn{Conn: chtest.Conn(t)}
	c := newCatalog(t, rec)
	store := openStore(t, "s1")
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "big", fuzzRows("shop1", 3000)))
	var l catalog.Lease
	v1 := lpublish(t, c, &l).Version
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "one", []catalogtest.Row{
		catalogtest.Upd(500, 1, item(1234, "shop1", map[string]any{"name": "changed"})),
	}))
	v2 := lpublish(t, c, &l).Version

	rec.mu.Lock()
	rec.stmts, rec.behind, rec.front = nil, 0, 0
	rec.mu.Unlock()
	start := time.Now()
	changes, pages := allChanges(t, c, "shop1", v1, v2, 1000)
	delta := time.Since(start)
	if len(changes) != 1 || changes[0].Op != catalog.ChangeUpdate || changeID(t, changes[0].Key) != 1234 || changes[0].Position != "0/1F4:1" {
		t.Fatalf("changes: %+v", changes)
	}
	if len(pages) != 1 || pages[0].Candidates != 1 || pages[0].Full {
		t.Fatalf("pages: %+v, want one page of one candidate from the members between the versions", pages)
	}
	rec.mu.Lock()
	stmts, front := rec.stmts, rec.front
	rec.mu.Unlock()
	rows := 0
	for _, q := range stmts {
		if !strings.Contains(q, "sluice_rows") {
			continue
		}
		rows++
		if !strings.Contains(q, "max_memory_usage") || !strings.Contains(q, "max_execution_time") {
			t.Fatalf("a changes statement without the read limits: %.300s", q)
		}
		if strings.Contains(q, "'big'") && strings.Contains(q, "'one'") && strings.Contains(q, "LIMIT 1 BY") {
			t.Fatalf("the candidate statement names a member both versions hold: %.600s", q)
		}
	}
	if front != 0 || rows < 3 {
		t.Fatalf("%d statements ahead of the pipeline's, %d over the rows table: %q", front, rows, stmts)
	}
	if cand, _ := changesOracle(t, c, "shop1", v1, v2, 1000); cand != 1 {
		t.Fatalf("%d candidates", cand)
	}

	// Control: a resync's clear between the versions (bound below the
	// update): every key is a candidate.
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "resync", []catalogtest.Row{
		catalogtest.Ins(600, 2, item(7, "shop1", map[string]any{"name": "recopied"})),
		catalogtest.Clear(600, 1, map[string]any{"tenant": "shop1"}),
	}))
	v3 := lpublish(t, c, &l).Version
	cand, full := changesOracle(t, c, "shop1", v1, v3, 1000)
	if !full || cand < 3000 {
		t.Fatalf("across a clear: %d candidates (full %v), want every key of both versions", cand, full)
	}
	start = time.Now()
	changes, _ = allChanges(t, c, "shop1", v2, v3, 100000)
	t.Logf("one change of 3,000 rows: %s (candidates from the members between the versions); across a clear, %d changes: %s (every key)", delta, len(changes), time.Since(start))
	deletes := 0
	for _, ch := range changes {
		if ch.Op == catalog.ChangeDelete {
			deletes++
			if ch.Position != "0/258:1" {
				t.Fatalf("a delete by the clear at %q, want the clear's position 0/258:1", ch.Position)
			}
		}
	}
	if deletes != 2999 {
		t.Fatalf("%d deletes across the clear, want 2999", deletes)
	}
	// Negative control: without the fallback the clear's deletes are lost.
	catalog.SetChangesNoFallback(c, true)
	changes, _ = allChanges(t, c, "shop1", v2, v3, 100000)
	catalog.SetChangesNoFallback(c, false)
	if len(changes) >= 2999 {
		t.Fatalf("without the fallback: %d changes, want the clear's deletes missing", len(changes))
	}
}

// TestChangesRange: From after To is ErrBadRange, From == To empty, an
// unknown version ErrNoSnapshot, an expired one an *ExpiredError naming
// the oldest retained version.
func TestChangesRange(t *testing.T) {
	c := newCatalog(t, chtest.Conn(t))
	store := openStore(t, "s1")
	var l catalog.Lease
	var vs []uint64
	for i := range 4 {
		index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprint("p", i), []catalogtest.Row{catalogtest.Ins(100+uint64(i), 1, item(int64(i), "shop1", nil))}))
		vs = append(vs, lpublish(t, c, &l).Version)
	}
	req := func(from, to uint64) error {
		_, err := c.Changes(t.Context(), catalog.ChangesRequest{Destination: "shop1", Table: catalogtest.Items.Name, From: from, To: to})
		return err
	}
	if err := req(vs[2], vs[1]); !errors.Is(err, catalog.ErrBadRange) {
		t.Fatalf("from > to: %v", err)
	}
	if err := req(0, vs[1]); !errors.Is(err, catalog.ErrBadRange) {
		t.Fatalf("no from: %v", err)
	}
	if p, err := c.Changes(t.Context(), catalog.ChangesRequest{Destination: "shop1", Table: catalogtest.Items.Name, From: vs[1], To: vs[1]}); err != nil || len(p.Changes) != 0 {
		t.Fatalf("from == to: %+v, %v", p, err)
	}
	if p, err := c.Changes(t.Context(), catalog.ChangesRequest{Destination: "shop1", Table: catalogtest.Items.Name, From: vs[0]}); err != nil || p.To != vs[3] || len(p.Changes) != 3 {
		t.Fatalf("to the latest: %+v, %v", p, err)
	}
	if err := req(vs[0], vs[3]+10); !errors.Is(err, catalog.ErrNoSnapshot) {
		t.Fatalf("an unknown to: %v", err)
	}
	if _, err := c.AdvanceRetention(t.Context(), l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 2}); err != nil {
		t.Fatal(err)
	}
	var exp *catalog.ExpiredError
	if err := req(vs[0], vs[3]); !errors.As(err, &exp) || exp.OldestRetained != vs[2] {
		t.Fatalf("an expired from: %v, want expired naming %d", err, vs[2])
	}
}
