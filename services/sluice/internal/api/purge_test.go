package api

import (
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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/state"
)

// The purge endpoints over a real state database and chDB: refused for a
// destination that is not retired and while a pin holds it (naming the
// pin); accepted once retired and unpinned; the publisher's RunPurges then
// erases it and the GET says so.
func TestPurgeHTTP(t *testing.T) {
	ctx := context.Background()
	pool := stateDB(t)
	states := state.NewDestinationStates(pool, "sluice")
	c := catalog.New(chtest.Conn(t), catalog.Options{})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	var metas []packstore.PackMeta
	for i, d := range []string{"shop1", "shop2", "shop1"} {
		metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, d, "p"+string(rune('a'+i)), []catalogtest.Row{
			catalogtest.Ins(uint64(100+i), 1, map[string]any{"id": int64(1), "tenant": d, "name": "n"}),
		}))
	}
	var refs []catalog.PackRef
	for _, m := range metas {
		ref, err := catalog.ReadRef(ctx, store, m.Path())
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	if _, err := c.Index(ctx, store, refs); err != nil {
		t.Fatal(err)
	}
	l, err := c.AcquireLease(ctx, "test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Publish(ctx, l, 10*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	l = res.Lease

	// Two dead letters of shop1 (an indexer's, naming it) and one of shop2.
	env := newDLQEnv(t)
	for _, d := range []string{"shop1", "shop2", "shop1"} {
		hdr := nats.Header{}
		hdr.Set(proto.HeaderDestination, d)
		hdr.Set(proto.HeaderStage, "indexer")
		hdr.Set(proto.HeaderReason, "corrupt pack")
		if _, err := env.js.PublishMsg(ctx, &nats.Msg{Subject: proto.DLQSubject("indexer"), Header: hdr, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, States: states, Reads: CatalogReads{C: c}, JS: env.js, Config: config.Default()})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	call := func(method, path string, out any) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(""))
		req.Header.Set(ClientHeader, "test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode < 300 {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		return resp.StatusCode, string(b)
	}
	if code, body := call("POST", "/api/v1/destinations/shop1/purge", nil); code != http.StatusConflict || !strings.Contains(body, "not retired") {
		t.Fatalf("purge of an active destination: %d %s", code, body)
	}
	if _, err := states.Set(ctx, "shop1", state.Retired, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PinSnapshot(ctx, res.Snapshot.Version, "audit"); err != nil {
		t.Fatal(err)
	}
	if code, body := call("POST", "/api/v1/destinations/shop1/purge", nil); code != http.StatusConflict || !strings.Contains(body, "snapshot 1 (audit) is pinned") {
		t.Fatalf("purge under a pin: %d %s", code, body)
	}
	if err := c.UnpinSnapshot(ctx, res.Snapshot.Version); err != nil {
		t.Fatal(err)
	}
	var st PurgeStatus
	if code, body := call("POST", "/api/v1/destinations/shop1/purge", &st); code != http.StatusAccepted || st.Request != catalog.PurgeRequested || st.Done || st.Members != 2 || st.DeadLettersErased != 2 {
		t.Fatalf("purge: %d %s", code, body)
	}
	if _, err := c.RunPurges(ctx, l, 10*time.Second, store, "purge1"); err != nil {
		t.Fatal(err)
	}
	if code, body := call("GET", "/api/v1/destinations/shop1/purge", &st); code != 200 || !st.Done || st.Request != catalog.PurgeDone {
		t.Fatalf("after the publisher ran it: %d %s", code, body)
	}
	// The request erased shop1's two dead letters (they hold its rows);
	// shop2's stays.
	dlq, err := env.js.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dlq.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("DLQ after the purge of shop1: %+v %v, want shop2's dead letter alone", info, err)
	}
	if m, err := dlq.GetMsg(ctx, 2); err != nil || m.Header.Get(proto.HeaderDestination) != "shop2" {
		t.Fatalf("the dead letter left: %v %v, want shop2's", m, err)
	}
	// What the purge leaves is said, with when it goes: its claims
	// (claims_grace) and its name in the state database (kept); a dead
	// letter of it that came after the request, until the DLQ's max age.
	var dead, claims, names *Remaining
	for i, r := range st.Remains {
		switch {
		case strings.HasPrefix(r.What, "dead letters"):
			dead = &st.Remains[i]
		case strings.HasPrefix(r.What, "claim-check"):
			claims = &st.Remains[i]
		case strings.Contains(r.What, "destination_states"):
			names = &st.Remains[i]
		}
	}
	if dead != nil {
		t.Errorf("remains say of the dead letters %+v, want none: the purge erased them (all: %+v)", dead, st.Remains)
	}
	if claims == nil || claims.Until == nil || names == nil || names.Until != nil {
		t.Errorf("remains %+v: want the claims with an expiry and the state rows kept", st.Remains)
	}
	hdr := nats.Header{}
	hdr.Set(proto.HeaderDestination, "shop1")
	hdr.Set(proto.HeaderStage, "router")
	if _, err := env.js.PublishMsg(ctx, &nats.Msg{Subject: proto.DLQSubject("router"), Header: hdr, Data: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	st = PurgeStatus{}
	if code, body := call("GET", "/api/v1/destinations/shop1/purge", &st); code != 200 {
		t.Fatalf("status after a late dead letter: %d %s", code, body)
	}
	dead = nil
	for i, r := range st.Remains {
		if strings.HasPrefix(r.What, "dead letters") {
			dead = &st.Remains[i]
		}
	}
	if dead == nil || dead.Count != 1 || dead.Until == nil || time.Until(*dead.Until) < 6*24*time.Hour {
		t.Errorf("remains say of a dead letter written after the purge %+v, want 1 until about 7 days from now (all: %+v)", dead, st.Remains)
	}
	if code, body := call("GET", "/api/v1/destinations/shop2/purge", &st); code != 200 || st.Done || st.Members != 1 {
		t.Fatalf("the other destination: %d %s", code, body)
	}
}
