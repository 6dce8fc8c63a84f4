package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// stderr runs f with os.Stderr captured.
func stderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stderr = old }()
	f()
	w.Close()
	return <-done
}

// announceSegment publishes the PACKS event the flusher publishes for a
// segment (one row per destination, on the table's subject).
func announceSegment(t *testing.T, js jetstream.JetStream, m packstore.PackMeta) {
	t.Helper()
	entries, err := m.Entries()
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, proto.PackEventSchema)
	for _, e := range entries {
		for j, v := range []string{m.PackID, m.StoreID, e.Destination, m.Table, m.Path(), m.Schema, e.First, e.Last} {
			b.Field(j).(*array.StringBuilder).Append(v)
		}
		b.Field(8).(*array.Int64Builder).Append(e.Rows)
		b.Field(9).(*array.Int64Builder).Append(e.Tombstones)
		b.Field(10).(*array.Int64Builder).Append(0)
	}
	rec := b.NewRecordBatch()
	b.Release()
	body, err := arrowcodec.Encode(rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{}
	hdr.Set(proto.HeaderWire, proto.WireVersion)
	hdr.Set(proto.HeaderMsgID, proto.PackMsgID(m.PackID))
	if _, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: proto.SegmentEventSubject(m.Table), Header: hdr, Data: body}); err != nil {
		t.Fatal(err)
	}
}

func itemRows(dest string, lsn uint64, ids ...int64) []catalogtest.Row {
	var out []catalogtest.Row
	for i, id := range ids {
		out = append(out, catalogtest.Ins(lsn, uint64(i+1), map[string]any{
			"id": id, "tenant": dest, "name": fmt.Sprintf("row %d of %s", id, dest), "qty": int32(id)}))
	}
	return out
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, st := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s (%s)", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCorruptSegmentHaltsWait (INVARIANTS.md rule 11,
// docs/adr/0034-corrupt-pack-halts.md): a segment of two destinations
// whose body is damaged is dead-lettered by the real indexer while the
// snapshot's through_lsn passes its changes. Both destinations are listed
// halted in GET /api/v1/status?view=halts with the pack, its positions and
// the resync commands; `sluice wait` exits 2 for an LSN at or above its
// first position and 0 below it. Negative control: with the halt detection
// off, wait says yes although the destinations' rows are in no snapshot. A
// resync of one destination done after the dead letter takes that one out;
// one done before it cures nothing; a resync of the whole table done after
// it holds wait (recovering) until a snapshot is through its end, then the
// halt is gone. A second corrupt segment, restored and replayed from the
// DLQ, is indexed and its halt gone.
func TestCorruptSegmentHaltsWait(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	cfg := config.Default()
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	storeDir := t.TempDir()
	store, err := packstore.OpenDir(storeDir, "local")
	if err != nil {
		t.Fatal(err)
	}
	conn := chtest.Conn(t)
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := state.Migrate(ctx, pool, "sluice"); err != nil {
		t.Fatal(err)
	}
	resyncs := state.NewResyncs(pool, "sluice")

	ix, err := indexer.New(cfg, indexer.Deps{JS: js, Catalog: conn, Packs: store})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cat := ix.Catalog()
	eventually(t, "the catalog schema", func() (bool, string) {
		_, err := cat.Indexed(ctx, nil)
		return err == nil, fmt.Sprint(err)
	})

	table := catalogtest.Items.Name
	now := time.Now()
	good := catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(now, "w1", 0), []catalogtest.Part{
		{Destination: "shop1", Rows: itemRows("shop1", 100, 1, 2)}})
	data, damaged := catalogtest.EncodeSegment(t, catalogtest.Items, "local", proto.SegmentID(now, "w1", 1), []catalogtest.Part{
		{Destination: "shop7", Rows: itemRows("shop7", 200, 70, 71)}, {Destination: "shop8", Rows: itemRows("shop8", 200, 80)}})
	if err := store.Put(ctx, damaged.Path(), pt.DamageBody(data, 16)); err != nil {
		t.Fatal(err)
	}
	later := catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(now, "w1", 2), []catalogtest.Part{
		{Destination: "shop1", Rows: itemRows("shop1", 300, 3)}})
	for _, m := range []packstore.PackMeta{good, damaged, later} {
		announceSegment(t, js, m)
	}
	eventually(t, "the sound segments indexed", func() (bool, string) {
		got, err := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: good.PackID}, {StoreID: "local", PackID: later.PackID}})
		return err == nil && len(got) == 2, fmt.Sprint(got, err)
	})
	// The frontier passes the dead-lettered segment's changes, as the
	// publisher's does once its event is terminated.
	l, err := cat.AcquireLease(ctx, "test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(through uint64) {
		t.Helper()
		res, err := cat.Publish(ctx, l, 10*time.Second, proto.LSN(through))
		if err != nil {
			t.Fatal(err)
		}
		l = res.Lease
	}
	publish(300)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	api.Register(h, api.Deps{Log: log, JS: js, Reads: api.CatalogReads{C: cat}, Resyncs: resyncs, Config: cfg})
	hs := httptest.NewServer(h.Handler())
	defer hs.Close()

	halts := func() []api.PackHalt {
		t.Helper()
		resp, err := http.Get(hs.URL + "/api/v1/status?view=halts")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st api.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.HaltsError != "" {
			t.Fatalf("status: %v %s", err, st.HaltsError)
		}
		return st.HaltedPacks
	}
	wait := func(lsn uint64, timeout string) (int, string) {
		t.Helper()
		var code int
		msg := stderr(t, func() {
			code = Main([]string{"--server", hs.URL, "--config", "/nonexistent/sluice.yaml", "wait", "--through-lsn", proto.LSN(lsn).String(), "--timeout", timeout})
		})
		return code, msg
	}
	read := func(dest string) string {
		t.Helper()
		return stdout(t, func() {
			Main([]string{"--server", hs.URL, "--config", "/nonexistent/sluice.yaml", "read", "--destination", dest, "--table", table})
		})
	}

	var hl []api.PackHalt
	eventually(t, "the damaged segment halted", func() (bool, string) {
		hl = halts()
		return len(hl) == 1, fmt.Sprintf("%+v", hl)
	})
	first := hl[0]
	if first.Table != table || !slices.Equal(first.Destinations, []string{"shop7", "shop8"}) || first.DestinationCount != 2 ||
		first.PackPath != damaged.Path() || !strings.HasPrefix(first.FirstPosition, proto.LSN(200).String()) ||
		!strings.HasPrefix(first.LastPosition, proto.LSN(200).String()) || !strings.Contains(first.Reason, packstore.ErrCorruptPack.Error()) {
		t.Fatalf("halt %+v", first)
	}
	for _, want := range []string{"sluice resync --table " + table + " --destination shop7", "sluice resync --table " + table + " --destination shop8", "sluice resync --table " + table} {
		if !slices.Contains(first.Recover, want) {
			t.Fatalf("halt recovers by %q, want %q among them", first.Recover, want)
		}
	}
	// wait: at and above the first position exit 2, below it 0.
	for _, lsn := range []uint64{200, 300} {
		code, msg := wait(lsn, "5s")
		if code != 2 || !strings.Contains(msg, "shop7, shop8") || !strings.Contains(msg, damaged.Path()) || !strings.Contains(msg, "--destination shop7") {
			t.Fatalf("wait %s: exit %d, %q; want 2 naming the halted destinations", proto.LSN(lsn), code, msg)
		}
	}
	if code, msg := wait(199, "5s"); code != 0 {
		t.Fatalf("wait %s (below the halt): exit %d, %q", proto.LSN(199), code, msg)
	}
	// Negative control: without the halt, wait says yes at 300 while
	// shop7's rows are in no snapshot (shop1's are).
	api.SetPackHaltsOff(true)
	code, msg := wait(300, "5s")
	api.SetPackHaltsOff(false)
	if code != 0 {
		t.Fatalf("control: wait without the halt: exit %d, %q", code, msg)
	}
	if got := read("shop7"); got != "" {
		t.Fatalf("control: shop7 reads %q", got)
	}
	if got := read("shop1"); strings.Count(got, "\n") != 3 {
		t.Fatalf("control: shop1 reads %q", got)
	}

	// Resyncs: one of the whole table whose copy began before the dead
	// pack's changes (bound 150) cures nothing; one of shop7 after it
	// takes shop7 out.
	runResync := func(dest, bound string, end uint64) {
		t.Helper()
		r, err := resyncs.Enqueue(ctx, cfg.Source.Slot, table, dest, nil, "operator")
		if err != nil {
			t.Fatal(err)
		}
		if got, ok, err := resyncs.Next(ctx, cfg.Source.Slot); err != nil || !ok || got.ID != r.ID {
			t.Fatalf("next resync: %+v %v %v", got, ok, err)
		}
		if err := resyncs.Chunk(ctx, r.ID, []string{"1"}, bound, 1, 0); err != nil {
			t.Fatal(err)
		}
		if err := resyncs.Finish(ctx, r.ID, proto.LSN(end).String(), nil); err != nil {
			t.Fatal(err)
		}
	}
	runResync("", proto.LSN(150).String(), 160)
	runResync("shop7", proto.LSN(250).String(), 260)
	eventually(t, "shop7 out of the halt", func() (bool, string) {
		hl = halts()
		return len(hl) == 1 && slices.Equal(hl[0].Destinations, []string{"shop8"}) && hl[0].RecoveringEndLSN == "", fmt.Sprintf("%+v", hl)
	})
	if code, msg := wait(300, "5s"); code != 2 || !strings.Contains(msg, "shop8") || strings.Contains(msg, "shop7") {
		t.Fatalf("wait after shop7's resync: exit %d, %q; want 2 naming shop8 alone", code, msg)
	}
	// The whole table, after it, ending at 400: recovering until a
	// snapshot is through 400 (wait holds, exit 1 on timeout), then gone.
	runResync("", proto.LSN(260).String(), 400)
	eventually(t, "the halt recovering", func() (bool, string) {
		hl = halts()
		return len(hl) == 1 && hl[0].RecoveringEndLSN == proto.LSN(400).String(), fmt.Sprintf("%+v", hl)
	})
	if code, msg := wait(300, "1s"); code != 1 || !strings.Contains(msg, "resynced") {
		t.Fatalf("wait while the resync is unpublished: exit %d, %q; want 1 (timed out, recovering)", code, msg)
	}
	publish(400)
	eventually(t, "the halt cured by the published resync", func() (bool, string) {
		hl = halts()
		return len(hl) == 0, fmt.Sprintf("%+v", hl)
	})
	if code, msg := wait(300, "5s"); code != 0 {
		t.Fatalf("wait after the published resync: exit %d, %q", code, msg)
	}

	// Replay: a second damaged segment, restored, then replayed.
	data2, damaged2 := catalogtest.EncodeSegment(t, catalogtest.Items, "local", proto.SegmentID(now, "w1", 3), []catalogtest.Part{
		{Destination: "shop9", Rows: itemRows("shop9", 500, 90)}})
	if err := store.Put(ctx, damaged2.Path(), pt.DamageBody(data2, 16)); err != nil {
		t.Fatal(err)
	}
	announceSegment(t, js, damaged2)
	eventually(t, "the second segment halted", func() (bool, string) {
		hl = halts()
		return len(hl) == 1 && hl[0].PackPath == damaged2.Path() && slices.Equal(hl[0].Destinations, []string{"shop9"}), fmt.Sprintf("%+v", hl)
	})
	publish(600)
	if code, msg := wait(500, "5s"); code != 2 || !strings.Contains(msg, "shop9") {
		t.Fatalf("wait over the second segment: exit %d, %q", code, msg)
	}
	// Restored from a backup (the store refuses to overwrite a file).
	if err := os.WriteFile(filepath.Join(storeDir, filepath.FromSlash(damaged2.Path())), data2, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := api.NewDLQ(js).Replay(ctx, hl[0].DLQSeq); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replayed segment indexed", func() (bool, string) {
		got, err := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: damaged2.PackID}})
		return err == nil && len(got) == 1, fmt.Sprint(got, err)
	})
	eventually(t, "the halt gone after the replay", func() (bool, string) {
		hl = halts()
		return len(hl) == 0, fmt.Sprintf("%+v", hl)
	})
	publish(700)
	if code, msg := wait(500, "5s"); code != 0 {
		t.Fatalf("wait after the replay: exit %d, %q", code, msg)
	}
	if got := read("shop9"); strings.Count(got, "\n") != 1 {
		t.Fatalf("shop9 after the replay reads %q", got)
	}
}
