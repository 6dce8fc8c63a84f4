package natsx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
)

func TestPublisherBoundsInFlightAndDedupes(t *testing.T) {
	e := startJS(t)
	ctx := ctxT(t)
	p := NewPublisher(e.js, 4)
	var futures []jetstream.PubAckFuture
	for i := range 200 {
		id := "r:" + strconv.Itoa(i%100) // every id twice: the second is a duplicate
		f, err := p.Publish(ctx, &nats.Msg{Subject: proto.RoutedSubject(1, "shop1"), Data: []byte("x"), Header: nats.Header{proto.HeaderMsgID: {id}}})
		if err != nil {
			t.Fatal(err)
		}
		if n := p.InFlight(); n > 4 {
			t.Fatalf("in flight %d > 4", n)
		}
		futures = append(futures, f)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				dups++
			}
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	if dups != 100 {
		t.Errorf("duplicates = %d, want 100", dups)
	}
	st, _ := e.js.Stream(ctx, proto.StreamRouted)
	info, _ := st.Info(ctx)
	if info.State.Msgs != 100 {
		t.Errorf("ROUTED holds %d messages, want 100", info.State.Msgs)
	}
}

func TestPublisherBlocksUntilContextEnds(t *testing.T) {
	e := startJS(t)
	// A subject no stream captures: the async publish never gets a PubAck
	// (no responders status resolves it as an error), exercising release.
	p := NewPublisher(e.js, 1)
	p.AckTimeout = 200 * time.Millisecond
	ctx := ctxT(t)
	f, err := p.Publish(ctx, &nats.Msg{Subject: "nowhere.a", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Ok():
		t.Fatal("publish to a subject without a stream acked")
	case err := <-f.Err():
		if err == nil {
			t.Fatal("nil error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("future never resolved")
	}
	// Slot released: the next publish does not block.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := p.Publish(short, &nats.Msg{Subject: proto.PacksSubject("d"), Data: []byte("x")}); err != nil {
		t.Fatalf("slot not released: %v", err)
	}
	// Hold the only slot with a publish, and a second Publish with an
	// expired context returns instead of blocking.
	expired, cancel2 := context.WithCancel(ctx)
	cancel2()
	p2 := NewPublisher(e.js, 1)
	p2.sem <- struct{}{} // slot taken
	if _, err := p2.Publish(expired, &nats.Msg{Subject: proto.PacksSubject("d"), Data: []byte("y")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	<-p2.sem
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A full stream (discard new) refuses publishes; PublishSync keeps retrying
// and succeeds once room is made — nothing is dropped. Also: publishing
// before the stream exists (no responders) succeeds once it is created.
func TestPublishSyncRetriesTransient(t *testing.T) {
	e := startJS(t)
	ctx := ctxT(t)
	st, err := e.js.Stream(ctx, proto.StreamPacks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgs = 2
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := PublishSync(ctx, e.js, &nats.Msg{Subject: proto.PacksSubject("d"), Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The third is refused while the stream is full.
	_, err = e.js.Publish(ctx, proto.PacksSubject("d"), []byte("3"))
	if !IsTransientPublishError(err) {
		t.Fatalf("full stream error %v not classified transient", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := PublishSync(ctx, e.js, &nats.Msg{Subject: proto.PacksSubject("d"), Data: []byte("3")})
		done <- err
	}()
	eventually(t, 5*time.Second, "a refused attempt", func() bool {
		info, _ := st.Info(ctx)
		return info != nil && info.State.Msgs == 2
	})
	select {
	case err := <-done:
		t.Fatalf("PublishSync returned while the stream was full: %v", err)
	default:
	}
	if err := st.Purge(ctx, jetstream.WithPurgeKeep(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PublishSync did not succeed after room was made")
	}

	// No stream yet: no responders, retried until the stream exists.
	if err := e.js.DeleteStream(ctx, proto.StreamChanges); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := PublishSync(ctx, e.js, &nats.Msg{Subject: proto.ChangesSubject("public.t"), Data: []byte("late")})
		done <- err
	}()
	if err := EnsureStreams(ctx, e.js, e.cfg); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A non-transient error returns at once.
	_, err = PublishSync(ctx, e.js, &nats.Msg{Subject: proto.PacksSubject("d"), Data: make([]byte, 2<<20)})
	if err == nil || IsTransientPublishError(err) {
		t.Fatalf("oversized publish: err = %v", err)
	}
	// Context end stops retrying.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = PublishSync(short, e.js, &nats.Msg{Subject: "nowhere.x", Data: []byte("x")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}

func TestDeadLetterSendData(t *testing.T) {
	e := startJS(t)
	ctx := ctxT(t)
	d := NewDeadLetter(e.js, "router")
	hdr := nats.Header{proto.HeaderMsgID: {"c:public.t:0/1:1:0/1:2"}, proto.HeaderTable: {"public.t"}, "Nats-Expected-Stream": {"WRONG"}}
	reason := fmt.Errorf("row 3: %w", errors.New(strings.Repeat("é", 1500)))
	for range 2 { // the second send is deduplicated by its msg id
		if err := d.SendData(ctx, []byte("row"), hdr, reason); err != nil {
			t.Fatal(err)
		}
	}
	msgs := dlqMessages(t, e)
	if len(msgs) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(msgs))
	}
	m := msgs[0]
	if got := m.Header.Get(proto.HeaderReason); len(got) > MaxReasonLen || len(got) < MaxReasonLen-4 {
		t.Errorf("reason length %d", len(got))
	}
	if m.Header.Get(proto.HeaderTable) != "public.t" || m.Header.Get(HeaderOrigMsgID) != "c:public.t:0/1:1:0/1:2" {
		t.Errorf("headers not copied: %v", m.Header)
	}
	// Too big for max_payload with the DLQ headers: body omitted, still recorded.
	big := make([]byte, 1<<20-10)
	if err := d.SendData(ctx, big, nats.Header{proto.HeaderMsgID: {"big"}}, errors.New("too big")); err != nil {
		t.Fatal(err)
	}
	msgs = dlqMessages(t, e)
	if len(msgs) != 2 || msgs[1].Header.Get(HeaderBodyOmitted) != strconv.Itoa(len(big)) || len(msgs[1].Data) != 0 {
		t.Fatalf("big dead letter: %d msgs, headers %v", len(msgs), msgs[len(msgs)-1].Header)
	}
}

func TestHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"a\r\nb":      "a  b",
		"ok":          "ok",
		"\x00x\x7f":   " x ",
		"héllo wörld": "héllo wörld",
	} {
		if got := HeaderValue(in, 100); got != want {
			t.Errorf("HeaderValue(%q) = %q, want %q", in, got, want)
		}
	}
	if got := HeaderValue("ééé", 3); got != "é" {
		t.Errorf("cut = %q, want é (no split rune)", got)
	}
}

func TestPermanentClassification(t *testing.T) {
	base := errors.New("x")
	if IsPermanent(nil) || Permanent(nil) != nil || IsPermanent(base) {
		t.Fatal("nil/plain errors must not be permanent")
	}
	if p := Permanent(base); !IsPermanent(p) || !errors.Is(p, base) || !IsPermanent(fmt.Errorf("wrap: %w", p)) {
		t.Fatal("Permanent must be detectable through wrapping and unwrap to its cause")
	}
	if !IsPermanent(fmt.Errorf("x: %w", proto.ErrWireVersion)) {
		t.Fatal("wire version errors are permanent")
	}
}
