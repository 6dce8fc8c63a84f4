package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

const testMaxPayload = 64 << 10

// dlqEnv is a real JetStream server with sluice's streams.
type dlqEnv struct {
	js jetstream.JetStream
	nc *nats.Conn
}

func newDLQEnv(t *testing.T) dlqEnv {
	t.Helper()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir(), MaxPayload: testMaxPayload})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	cfg := config.Default()
	cfg.NATS.MaxPayload = testMaxPayload
	cfg.NATS.MaxBytes = 64 << 20
	if err := natsx.EnsureStreams(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	return dlqEnv{js: js, nc: nc}
}

// deadLetter publishes body to subject, fetches it back as a consumer would
// and dead-letters it for stage with reason; it returns the DLQ sequence.
func (e dlqEnv) deadLetter(t *testing.T, stream, subject, stage, reason string, body []byte, hdr nats.Header) uint64 {
	t.Helper()
	ctx := context.Background()
	msg := &nats.Msg{Subject: subject, Header: hdr, Data: body}
	if _, err := e.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	cons, err := e.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.NewDeadLetter(e.js, stage).Send(ctx, m, errString(reason)); err != nil {
		t.Fatal(err)
	}
	st, _ := e.js.Stream(ctx, proto.StreamDLQ)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// checkLeaks verifies, after every cleanup of t (the NATS server's
// included), that t left no goroutine behind.
func checkLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

type errString string

func (e errString) Error() string { return string(e) }

func arrowBody(t *testing.T) []byte {
	t.Helper()
	rec := packstoretest.Batch(nil, []packstoretest.Row{
		{ID: 1, Tenant: "shop1", Note: packstoretest.Str("a"), Op: proto.OpInsert, LSN: 10, Seq: 1},
		{ID: 2, Tenant: "shop1", Op: proto.OpInsert, LSN: 10, Seq: 2},
	})
	defer rec.Release()
	b, err := arrowcodec.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func routedHeader() nats.Header {
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderTable, "public.items")
	h.Set(proto.HeaderDestination, "shop1")
	h.Set(proto.HeaderMsgID, "r:orig-1")
	h.Set(proto.HeaderTraceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	return h
}

func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestDLQListShowReplayPurge(t *testing.T) {
	checkLeaks(t)
	e := newDLQEnv(t)
	ctx := context.Background()
	d := NewDLQ(e.js)

	if got, err := d.List(ctx, "", 0); err != nil || len(got) != 0 {
		t.Fatalf("empty DLQ: %v %v", got, err)
	}
	body := arrowBody(t)
	s1 := e.deadLetter(t, proto.StreamRouted, proto.RoutedSubject(3, "shop1"), "flusher", "corrupt pack: bad footer", body, routedHeader())
	s2 := e.deadLetter(t, proto.StreamChanges, proto.ChangesSubject("public.items"), "router", "unsupported wire version", []byte("not arrow"), nats.Header{proto.HeaderWire: {"9.0"}})

	all, err := d.List(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Seq != s1 || all[1].Seq != s2 {
		t.Fatalf("list: %+v", all)
	}
	if all[0].Stage != "flusher" || all[0].Reason != "corrupt pack: bad footer" || all[0].OrigSubject != "sluice.routed.3.shop1" || all[0].OrigStream != proto.StreamRouted || all[0].OrigSeq != 1 || all[0].Time.IsZero() {
		t.Fatalf("entry: %+v", all[0])
	}
	only, err := d.List(ctx, "router", 0)
	if err != nil || len(only) != 1 || only[0].Seq != s2 {
		t.Fatalf("list --stage router: %+v %v", only, err)
	}
	if lim, err := d.List(ctx, "", 1); err != nil || len(lim) != 1 {
		t.Fatalf("list --limit 1: %+v %v", lim, err)
	}
	if _, err := d.List(ctx, "Bad Stage", 0); err == nil {
		t.Fatal("a bad stage name was accepted")
	}

	shown, err := d.Show(ctx, s1)
	if err != nil {
		t.Fatal(err)
	}
	if shown.Body == nil || shown.Body.Error != "" || shown.Body.Rows != 2 || len(shown.Body.Fields) != 8 || shown.Body.Fields[0].Name != "id" || shown.Body.Fields[0].Kind != string(proto.KindInt64) {
		t.Fatalf("show body: %+v", shown.Body)
	}
	if shown.Headers[proto.HeaderReason][0] != "corrupt pack: bad footer" || shown.Body.Metadata[proto.MetaTable] != "public.items" {
		t.Fatalf("show headers: %+v", shown.Headers)
	}
	bad, err := d.Show(ctx, s2)
	if err != nil || bad.Body == nil || bad.Body.Error == "" {
		t.Fatalf("an undecodable body must be summarised with its error: %+v %v", bad.Body, err)
	}
	if _, err := d.Show(ctx, 999); err == nil || !strings.Contains(err.Error(), "no dead letter") {
		t.Fatalf("show of a missing entry: %v", err)
	}

	// Replay: back to the original subject, original headers, replay id, DLQ entry gone.
	before := streamMsgs(t, e.js, proto.StreamRouted)
	r, err := d.Replay(ctx, s1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Subject != "sluice.routed.3.shop1" || r.Stream != proto.StreamRouted || r.Duplicate {
		t.Fatalf("replay: %+v", r)
	}
	st, _ := e.js.Stream(ctx, proto.StreamRouted)
	m, err := st.GetMsg(ctx, r.NewSeq)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, body) || m.Header.Get(proto.HeaderMsgID) != "replay:"+itoa(s1) || m.Header.Get(proto.HeaderTable) != "public.items" ||
		m.Header.Get(proto.HeaderTraceparent) == "" || m.Header.Get(proto.HeaderReason) != "" || m.Header.Get(proto.HeaderStage) != "" || m.Header.Get(natsx.HeaderOrigMsgID) != "" {
		t.Fatalf("replayed message: %v %q", m.Header, m.Data[:8])
	}
	if got := streamMsgs(t, e.js, proto.StreamRouted); got != before+1 {
		t.Fatalf("ROUTED has %d messages, want %d", got, before+1)
	}
	if _, err := d.Show(ctx, s1); err == nil {
		t.Fatal("a replayed dead letter is still in the DLQ")
	}

	// Purge by stage.
	if _, err := d.Purge(ctx, "flusher", s2); err == nil {
		t.Fatal("purge --stage flusher --seq of a router entry was accepted")
	}
	p, err := d.Purge(ctx, "router", 0)
	if err != nil || p.Purged != 1 {
		t.Fatalf("purge: %+v %v", p, err)
	}
	if left, _ := d.List(ctx, "", 0); len(left) != 0 {
		t.Fatalf("after purge: %+v", left)
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// TestDLQReplayIsIdempotent replays one dead letter twice as if the first
// replay crashed between its publish and its delete: the target stream
// stores it once. The negative control switches the replay id off and the
// message is stored twice.
func TestDLQReplayIsIdempotent(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		name       string
		noID       bool
		wantStored uint64
	}{{"with replay id", false, 1}, {"negative control: no replay id", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDLQEnv(t)
			ctx := context.Background()
			seq := e.deadLetter(t, proto.StreamRouted, proto.RoutedSubject(1, "shop2"), "flusher", "boom", arrowBody(t), routedHeader())
			before := streamMsgs(t, e.js, proto.StreamRouted)
			d := NewDLQ(e.js)
			d.noReplayID, d.stopBeforeDelete = tc.noID, true
			if _, err := d.Replay(ctx, seq); err != nil {
				t.Fatal(err)
			}
			d.stopBeforeDelete = false
			r, err := d.Replay(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			got := streamMsgs(t, e.js, proto.StreamRouted) - before
			if got != tc.wantStored {
				t.Fatalf("replaying twice stored %d messages, want %d", got, tc.wantStored)
			}
			if !tc.noID && !r.Duplicate {
				t.Fatalf("second replay not reported as a duplicate: %+v", r)
			}
		})
	}
}

// TestDLQReplayOmittedBody dead-letters a message whose body does not fit
// in the DLQ with its headers; the replay reads it from the original stream.
func TestDLQReplayOmittedBody(t *testing.T) {
	checkLeaks(t)
	e := newDLQEnv(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), testMaxPayload-400)
	seq := e.deadLetter(t, proto.StreamRouted, proto.RoutedSubject(2, "shop3"), "flusher", strings.Repeat("long reason ", 60), big, routedHeader())
	d := NewDLQ(e.js)
	entry, err := d.Show(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if entry.BodyOmitted != len(big) || entry.Bytes != 0 {
		t.Fatalf("want an omitted body, got %+v", entry)
	}
	r, err := d.Replay(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := e.js.Stream(ctx, proto.StreamRouted)
	m, err := st.GetMsg(ctx, r.NewSeq)
	if err != nil || !bytes.Equal(m.Data, big) {
		t.Fatalf("replayed body: %d bytes, %v", len(m.Data), err)
	}
}

func TestDLQReplayRefusals(t *testing.T) {
	checkLeaks(t)
	e := newDLQEnv(t)
	ctx := context.Background()
	// A dead letter that never was a stream message (the reader's kind).
	if err := natsx.NewDeadLetter(e.js, "reader").SendData(ctx, []byte("x"), nats.Header{}, errString("bad tuple")); err != nil {
		t.Fatal(err)
	}
	d := NewDLQ(e.js)
	if _, err := d.Replay(ctx, 1); err == nil || !strings.Contains(err.Error(), "Sluice-Orig-Subject") {
		t.Fatalf("replay without an origin: %v", err)
	}
	res, err := d.ReplayAll(ctx, "")
	if err != nil || len(res) != 1 || res[0].Error == "" {
		t.Fatalf("replay --all must report the entry it cannot replay: %+v %v", res, err)
	}
}

// TestDLQHTTP drives the endpoints the CLI uses through httpx.
func TestDLQHTTP(t *testing.T) {
	checkLeaks(t)
	e := newDLQEnv(t)
	seq := e.deadLetter(t, proto.StreamRouted, proto.RoutedSubject(3, "shop1"), "flusher", "bad", arrowBody(t), routedHeader())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	RegisterDLQ(h, Deps{JS: e.js, Log: log})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()

	call := func(method, path string, out any) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set(ClientHeader, "test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			_ = json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	var list []DLQEntry
	if code := call("GET", "/api/v1/dlq?stage=flusher", &list); code != 200 || len(list) != 1 || list[0].Seq != seq {
		t.Fatalf("list: %d %+v", code, list)
	}
	var one DLQEntry
	if code := call("GET", "/api/v1/dlq/"+itoa(seq), &one); code != 200 || one.Body == nil || one.Body.Rows != 2 {
		t.Fatalf("show: %d %+v", code, one)
	}
	if code := call("GET", "/api/v1/dlq/abc", nil); code != 400 {
		t.Fatalf("show abc: %d, want 400", code)
	}
	if code := call("GET", "/api/v1/dlq/77", nil); code != 404 {
		t.Fatalf("show 77: %d, want 404", code)
	}
	// Without the client header a state change is refused (a cross-site
	// form post cannot set it).
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/dlq/purge", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("purge without %s: %v %v", ClientHeader, resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	var r ReplayResult
	if code := call("POST", "/api/v1/dlq/"+itoa(seq)+"/replay", &r); code != 200 || r.Stream != proto.StreamRouted {
		t.Fatalf("replay: %d %+v", code, r)
	}
	var p PurgeResult
	if code := call("POST", "/api/v1/dlq/purge", &p); code != 200 || p.Purged != 0 {
		t.Fatalf("purge: %d %+v", code, p)
	}
	var rs []ReplayResult
	if code := call("POST", "/api/v1/dlq/replay?stage=flusher", &rs); code != 200 || len(rs) != 0 {
		t.Fatalf("replay all: %d %+v", code, rs)
	}
}
