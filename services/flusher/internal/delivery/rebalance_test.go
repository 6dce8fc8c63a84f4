package delivery

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// leaseHolders returns, per partition, the holder of its live lease (by
// the server clock).
func (e *env) leaseHolders(t testing.TB) map[int]string {
	rows, err := e.pool.Query(e.ctx, `SELECT name, holder FROM sluice.leases WHERE name LIKE 'flusher/p%' AND expires_at > now()`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var name, holder string
		if err := rows.Scan(&name, &holder); err != nil {
			t.Fatal(err)
		}
		var p int
		if _, err := fmt.Sscanf(name, "flusher/p%d", &p); err == nil {
			out[p] = holder
		}
	}
	return out
}

// packCopies counts, per (destination, key, position), the packs holding it.
func (e *env) packCopies(t testing.TB) map[string]int {
	out := map[string]int{}
	err := e.store.List(e.ctx, "", func(path string) error {
		b, err := e.store.Get(e.ctx, path)
		if err != nil {
			return err
		}
		meta, recs, err := packstore.DecodePack(b, nil)
		if err != nil {
			return err
		}
		for _, r := range recs {
			ids := r.Column(0).(*array.Int64)
			lsn := r.Column(r.Schema().FieldIndices(proto.ColLSN)[0]).(*array.Uint64)
			seq := r.Column(r.Schema().FieldIndices(proto.ColSeq)[0]).(*array.Uint64)
			for i := 0; i < int(r.NumRows()); i++ {
				out[fmt.Sprintf("%s/%d@%d:%d", meta.Destination, ids.Value(i), lsn.Value(i), seq.Value(i))]++
			}
			r.Release()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Several live replicas on one JetStream and Postgres: each claims its fair
// share; a joining replica gets partitions the others drain and release; a
// dying replica's partitions are taken over once its leases expire. No
// change is lost, no cursor passes an unflushed change, and no change
// handed over gracefully lands in two packs.
func TestRebalanceAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("several replicas and lease expiry")
	}
	const parts = 6
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = parts
		c.Delivery.FlushInterval = 150 * time.Millisecond
		c.Delivery.LeaseTTL = 3 * time.Second
	})
	var v violations
	hook := func(m *Manager) { m.afterAdvance = v.hook(t, e) }
	dests := make([]string, 0, 2*parts)
	for p := 0; p < parts; p++ {
		dests = append(dests, destIn(p, parts, fmt.Sprintf("r%d-", p)), destIn(p, parts, fmt.Sprintf("s%d-", p)))
	}
	id, lsn := int64(0), uint64(1000)
	send := func(rounds int) {
		for i := 0; i < rounds; i++ {
			for _, d := range dests {
				id++
				lsn++
				e.publish(t, d, []pt.Row{{ID: id, LSN: lsn, Seq: 1}})
			}
		}
	}
	share := func(want map[string]int) func() bool {
		return func() bool {
			got := map[string]int{}
			for _, h := range e.leaseHolders(t) {
				got[h]++
			}
			return fmt.Sprint(got) == fmt.Sprint(want)
		}
	}
	settled := func(what string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool {
			if !e.allPacked(t) {
				return false
			}
			for p := 0; p < parts; p++ {
				if n, _ := e.ackPending(t, p); n != 0 {
					return false
				}
			}
			return true
		})
	}

	a := e.start(t, "a", hook)
	waitFor(t, 20*time.Second, "a owns every partition", share(map[string]int{"a": parts}))
	send(2)

	b := e.start(t, "b", hook)
	send(2)
	waitFor(t, 30*time.Second, "a and b share 3/3", share(map[string]int{"a": 3, "b": 3}))
	send(2)

	c := e.start(t, "c", func(m *Manager) { hook(m); m.abrupt = true })
	send(2)
	waitFor(t, 30*time.Second, "a, b, c share 2/2/2", share(map[string]int{"a": 2, "b": 2, "c": 2}))
	send(2)
	settled("every change so far packed and acked")
	// Handed over gracefully (drain, then release): no change in two packs.
	for k, n := range e.packCopies(t) {
		if n != 1 {
			t.Errorf("change %s is in %d packs after graceful handovers", k, n)
		}
	}
	for _, r := range []*running{a, b, c} {
		if st := r.m.Status(); st.Members != 3 || len(st.OwnedPartitions) != 2 {
			t.Errorf("%s: members %d, owns %v", st.ID, st.Members, st.OwnedPartitions)
		}
	}

	// c dies: no drain, no release, its connection drops.
	send(1)
	c.nc.Close()
	c.stop()
	send(2)
	waitFor(t, 30*time.Second, "a and b take over c's partitions after its leases expire", share(map[string]int{"a": 3, "b": 3}))
	send(2)
	settled("every change packed and acked after the takeover")

	if errs := v.get(); len(errs) > 0 {
		t.Fatalf("a cursor passed an unflushed change: %v", errs)
	}
	var dups []string
	for k, n := range e.packCopies(t) {
		if n > 1 {
			dups = append(dups, k)
		}
	}
	sort.Strings(dups)
	// After the crash a change c had packed but not acked may be packed
	// again by the new owner (apply is idempotent by position); it is
	// never lost.
	t.Logf("%d changes in more than one pack after the crash: %v", len(dups), dups)
	for _, d := range dests {
		if err := e.checkCursor(t, d, e.cursor(t, d)); err != nil {
			t.Fatal(err)
		}
	}
}

// A zombie's group cursor write is refused: the lease is stolen after the
// pack is written and before the group's AdvanceMany; the flush fails with
// the partition lost, the cursor stays unwritten and nothing is acked.
// (The fence's negative control is in shared/state: AdvanceMany without it
// lets the zombie's row land.)
func TestGroupCursorWriteFencedAfterLeaseLoss(t *testing.T) {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1; c.Delivery.LeaseTTL = time.Hour })
	r := e.start(t, "zombie", func(m *Manager) {
		m.putFault = func(string, []string) error { // the pack is about to be written: steal the lease
			if _, err := e.pool.Exec(e.ctx, `UPDATE sluice.leases SET expires_at = now() WHERE name = $1`, PartitionLease(0)); err != nil {
				t.Error(err)
			}
			return nil
		}
	})
	e.publish(t, "d", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	waitFor(t, 5*time.Second, "buffered", func() bool { return r.m.Status().BufferedRows == 1 })
	r.m.mu.Lock()
	r.m.enqueueLocked(r.m.dests["d"], "test")
	r.m.mu.Unlock()
	waitFor(t, 10*time.Second, "flush failed", func() bool { return testutilValue(r.m, "failed") > 0 })
	if c := e.cursor(t, "d"); c != (proto.Position{}) {
		t.Fatalf("the zombie's cursor write landed: %s", c)
	}
	if testutilValue(r.m, "ok") != 0 {
		t.Fatal("the zombie's flush succeeded")
	}
	if pending, _ := e.ackPending(t, 0); pending != 1 {
		t.Fatalf("ack pending %d, want the message unacked", pending)
	}
}
