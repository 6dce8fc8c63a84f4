package publisher_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// claimBody is a dead-lettered batch (a flusher's ROUTED message) whose
// rows at positions sit at refs carry claims and whose row at free does not.
func claimBody(t *testing.T, free proto.Position, refs ...proto.Position) []byte {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColClaims, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	add := func(p proto.Position, claims []string) {
		b.Field(0).(*array.Int8Builder).Append(proto.OpInsert)
		b.Field(1).(*array.Uint64Builder).Append(uint64(p.LSN))
		b.Field(2).(*array.Uint64Builder).Append(p.Seq)
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		for _, c := range claims {
			lb.ValueBuilder().(*array.StringBuilder).Append(c)
		}
	}
	add(free, nil)
	for _, p := range refs {
		add(p, []string{"body"})
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	body, err := arrowcodec.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestClaimGC: with a snapshot published through X and a dead letter
// whose row at X-5 carries a claim, one pass deletes exactly the claim
// below X, below the dead letter's row and older than claims_grace, and
// keeps the one above X, the one written within the grace and the one the
// dead letter refers to; sluice_catalog_gc_claims_total counts it. Each
// negative control switches one rule off (SetClaimRuleOff) and its claim
// is deleted. Once the dead letter is gone (replayed), its claim stays
// for claims_grace (a replay in flight), then goes.
func TestClaimGC(t *testing.T) {
	ctx := t.Context()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cfg := config.Default()
	cfg.Delivery.Partitions = 1
	cfg.Catalog.ClaimsGrace = time.Hour
	cfg.NATS.MaxAge = time.Hour
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	conn := chtest.Conn(t)
	cat := catalog.New(conn, catalog.Options{})
	if err := cat.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	const x = proto.LSN(0x10000)
	lease, err := cat.AcquireLease(ctx, "test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Publish(ctx, lease, 10*time.Second, x); err != nil {
		t.Fatal(err)
	}
	dlqPos := proto.Position{LSN: x - 5, Seq: 1}
	if err := natsx.NewDeadLetter(js, "flusher").SendData(ctx, claimBody(t, proto.Position{LSN: x - 30, Seq: 1}, dlqPos), nats.Header{}, errors.New("halted destination")); err != nil {
		t.Fatal(err)
	}

	const table = "public.docs"
	claims := map[string]proto.Position{
		"collectable":    {LSN: x - 10, Seq: 1},
		"above_frontier": {LSN: x + 10, Seq: 1},
		"young":          {LSN: x - 20, Seq: 1}, // a backfill's row: old position, just written
		"referenced":     dlqPos,
	}
	old := time.Now().Add(-2 * time.Hour)
	// setup writes the claims into a fresh store (every one but "young"
	// written 2 hours ago) and returns a publisher over it.
	setup := func(t *testing.T) (*packstore.DirStore, *publisher.Publisher, *prometheus.Registry) {
		store, err := packstore.OpenDir(t.TempDir(), "local")
		if err != nil {
			t.Fatal(err)
		}
		for name, pos := range claims {
			p := proto.ClaimPath(table, pos, "body")
			if err := store.PutClaim(ctx, p, []byte("a large value of "+name)); err != nil {
				t.Fatal(err)
			}
			if name != "young" {
				if err := os.Chtimes(filepath.Join(store.Root(), filepath.FromSlash(p)), old, old); err != nil {
					t.Fatal(err)
				}
			}
		}
		reg := prometheus.NewRegistry()
		pb, err := publisher.New(cfg, publisher.Deps{JS: js, Catalog: conn, Metrics: reg, Packs: store})
		if err != nil {
			t.Fatal(err)
		}
		return store, pb, reg
	}
	// left names the claims still in store.
	left := func(t *testing.T, store *packstore.DirStore) []string {
		var out []string
		for name, pos := range claims {
			if _, err := store.GetClaim(ctx, proto.ClaimPath(table, pos, "body")); err == nil {
				out = append(out, name)
			} else if !errors.Is(err, packstore.ErrNotFound) {
				t.Fatal(err)
			}
		}
		slices.Sort(out)
		return out
	}
	pass := func(t *testing.T, pb *publisher.Publisher, now time.Time) publisher.ClaimStats {
		st, err := publisher.CollectClaims(ctx, pb, now)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("rule", func(t *testing.T) {
		store, pb, reg := setup(t)
		st := pass(t, pb, time.Now())
		if got, want := left(t, store), []string{"above_frontier", "referenced", "young"}; !slices.Equal(got, want) {
			t.Fatalf("claims left %v, want %v (pass %+v)", got, want, st)
		}
		if st.Deleted != 1 || st.AboveFrontier != 1 || st.Referenced != 1 || st.Young != 1 || st.Floor != dlqPos || st.Through != x {
			t.Fatalf("pass %+v", st)
		}
		if n := counterValue(t, reg, "sluice_catalog_gc_claims_total"); n != 1 {
			t.Fatalf("sluice_catalog_gc_claims_total %v, want 1", n)
		}
		// Idempotent: a second pass deletes nothing more.
		if st := pass(t, pb, time.Now()); st.Deleted != 0 {
			t.Fatalf("second pass %+v", st)
		}
	})

	// The dead letter's floor is below the claim above X, so the
	// frontier's control switches both off; the referenced rule's control
	// shows the frontier alone still keeps that claim.
	for _, c := range []struct {
		rules int
		claim string
		kept  []string
	}{
		{publisher.ClaimRuleFrontier | publisher.ClaimRuleReferenced, "above_frontier", nil},
		{publisher.ClaimRuleReferenced, "referenced", []string{"above_frontier", "young"}},
		{publisher.ClaimRuleGrace, "young", []string{"above_frontier", "referenced"}},
	} {
		t.Run("negative control/"+c.claim, func(t *testing.T) {
			defer publisher.SetClaimRuleOff(c.rules)()
			store, pb, _ := setup(t)
			pass(t, pb, time.Now())
			got := left(t, store)
			if slices.Contains(got, c.claim) {
				t.Fatalf("with its rule off, the %s claim is still kept: the test would not catch the rule's loss", c.claim)
			}
			for _, k := range c.kept {
				if !slices.Contains(got, k) {
					t.Fatalf("with only the %s claim's rule off, the %s claim went too (left %v)", c.claim, k, got)
				}
			}
		})
	}

	t.Run("replay in flight", func(t *testing.T) {
		store, pb, _ := setup(t)
		now := time.Now()
		pass(t, pb, now)
		// The dead letter is replayed: republished (in flight) and deleted.
		s, err := js.Stream(ctx, proto.StreamDLQ)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		if st := pass(t, pb, now.Add(time.Minute)); !slices.Contains(left(t, store), "referenced") {
			t.Fatalf("a minute after its dead letter left, the referenced claim is gone (pass %+v)", st)
		}
		if st := pass(t, pb, now.Add(2*time.Hour)); slices.Contains(left(t, store), "referenced") {
			t.Fatalf("claims_grace after its dead letter left, the claim is still kept (pass %+v)", st)
		}
	})
}
