package kit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// TestFaultProxyDropsOneFrame: through the proxy, a real (embedded)
// JetStream stores every publish but the one the proxy drops — the later
// ones on the same connection included — and the dropped one gets no
// PubAck; core PUB/MSG traffic and a large payload pass intact; a resend
// is stored.
func TestFaultProxyDropsOneFrame(t *testing.T) {
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir(), MaxPayload: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	px, err := StartFaultProxy(strings.TrimPrefix(srv.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	nc, err := nats.Connect(px.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The dropped publish's ack never comes: a short async timeout turns
	// that into an error instead of a wait.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}

	// Core publish and subscribe (PUB without headers, MSG back), with a
	// payload larger than the proxy's buffers.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MB
	sub, err := nc.SubscribeSync("core.x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("core.x", big); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || !bytes.Equal(m.Data, big) {
		t.Fatalf("core message through the proxy: err %v, %d bytes (want %d intact)", err, len(m.Data), len(big))
	}

	dropped := px.DropNext(func(f Frame) bool { return f.MsgID() == "m5" })
	futs := make([]jetstream.PubAckFuture, 10)
	for i := range futs {
		msg := &nats.Msg{Subject: "t.a", Data: []byte(fmt.Sprintf("payload %d", i)), Header: nats.Header{"Sluice-Rows": []string{"3"}}}
		if futs[i], err = js.PublishMsgAsync(msg, jetstream.WithMsgID(fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range futs {
		select {
		case ack := <-f.Ok():
			if i == 5 {
				t.Fatalf("the dropped message m5 was acked: %+v", ack)
			}
		case err := <-f.Err():
			if i != 5 {
				t.Fatalf("m%d: %v", i, err)
			}
			if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
				t.Errorf("m5: %v, want a publish timeout", err)
			}
		case <-ctx.Done():
			t.Fatalf("m%d never resolved", i)
		}
	}
	f := <-dropped
	if f.Subject != "t.a" || f.MsgID() != "m5" || f.Rows() != 3 || f.Reply == "" || f.Conn != 1 {
		t.Errorf("dropped frame: %s (reply %q)", f, f.Reply)
	}
	if px.Drops() != 1 || len(px.Dropped()) != 1 {
		t.Errorf("drops %d, kept %d; want 1", px.Drops(), len(px.Dropped()))
	}
	if got := stored(t, ctx, st); !equal(got, []string{"m0", "m1", "m2", "m3", "m4", "m6", "m7", "m8", "m9"}) {
		t.Fatalf("stored %v: want every message but m5", got)
	}

	// The loss is survivable: a resend is stored (and the duplicates are
	// recognised as such).
	resent := px.NotifyNext(func(f Frame) bool { return f.MsgID() == "m5" })
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "t.a", Data: []byte("payload 5")}, jetstream.WithMsgID("m5"))
	if err != nil || ack.Duplicate {
		t.Fatalf("resending m5: %v %+v", err, ack)
	}
	ack, err = js.PublishMsg(ctx, &nats.Msg{Subject: "t.a", Data: []byte("payload 6")}, jetstream.WithMsgID("m6"))
	if err != nil || !ack.Duplicate {
		t.Fatalf("resending m6: %v %+v, want a duplicate", err, ack)
	}
	select {
	case f := <-resent:
		if f.Subject != "t.a" {
			t.Errorf("resend seen as %s", f)
		}
	default:
		t.Error("the resend of m5 was not reported")
	}
	if got := px.Forwarded("t.>"); got != 11 {
		t.Errorf("forwarded %d publishes on t.>, want 11", got)
	}

	// A rate rule on one subject leaves the others alone; every message is
	// either stored or dropped, never both.
	px.DropRate(SubjectMatches("t.b"), 0.3, 0, 1)
	var acked, timedOut int
	futs = futs[:0]
	for i := 0; i < 40; i++ {
		subj := "t.b"
		if i%4 == 0 {
			subj = "t.c"
		}
		fut, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: []byte("x")}, jetstream.WithMsgID(fmt.Sprintf("r%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, fut)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
			acked++
		case <-f.Err():
			timedOut++
		case <-ctx.Done():
			t.Fatal("a publish never resolved")
		}
	}
	px.DropRate(nil, 0, 0, 0)
	drops := px.Dropped()[1:]
	for _, d := range drops {
		if d.Subject != "t.b" {
			t.Errorf("rate rule dropped %s", d)
		}
	}
	if len(drops) == 0 || len(drops) != timedOut || acked+timedOut != 40 {
		t.Errorf("rate rule: %d dropped, %d timed out, %d acked of 40", len(drops), timedOut, acked)
	}
	if n := len(stored(t, ctx, st)); n != 10+acked {
		t.Errorf("stream holds %d messages, want %d", n, 10+acked)
	}
	t.Logf("rate 0.3 on t.b: %d of 30 dropped", len(drops))
}

// TestFaultProxyFraming: the client->server parser keeps frame boundaries
// when the stream arrives a byte at a time, passes every other operation
// and a malformed PUB line through, and drops exactly the selected frame.
func TestFaultProxyFraming(t *testing.T) {
	frames := []string{
		"CONNECT {\"verbose\":false,\"headers\":true}\r\n",
		"PING\r\n",
		"SUB _INBOX.x.* 1\r\n",
		"PUB a.b 5\r\nhello\r\n",
		"HPUB sluice.changes.public.t _INBOX.x.1 37 41\r\nNATS/1.0\r\nNats-Msg-Id: one\r\nA:  b\r\n\r\nbody\r\n",
		"hpub sluice.changes.public.t _INBOX.x.2 30 34\r\nNATS/1.0\r\nNats-Msg-Id: two\r\n\r\nbody\r\n",
		"PUB c.d _INBOX.x.3 0\r\n\r\n",
		"PUB broken\r\n",
		"UNSUB 1 5\r\n",
		"PONG\r\n",
	}
	p := &FaultProxy{forwarded: map[string]int{}}
	got := p.DropNext(func(f Frame) bool { return f.MsgID() == "two" })
	var out bytes.Buffer
	in := strings.NewReader(strings.Join(frames, ""))
	if err := p.pipe(1, iotest.OneByteReader(in), &out); err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("pipe ended with %v, want EOF", err)
	}
	want := strings.Join(append(append([]string(nil), frames[:5]...), frames[6:]...), "")
	if out.String() != want {
		t.Errorf("forwarded:\n%q\nwant:\n%q", out.String(), want)
	}
	f := <-got
	if f.Subject != "sluice.changes.public.t" || f.Reply != "_INBOX.x.2" || f.Size != 34 || f.MsgID() != "two" || !ChangesData(f) {
		t.Errorf("dropped %+v", f)
	}
	if p.Forwarded(">") != 3 || p.Forwarded("sluice.changes.>") != 1 {
		t.Errorf("forwarded counts: all %d, changes %d", p.Forwarded(">"), p.Forwarded("sluice.changes.>"))
	}
}

func TestSubjectMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"sluice.changes.>", "sluice.changes.public.t", true},
		{"sluice.changes.>", "sluice.changes._tick", true},
		{"sluice.changes.>", "sluice.changes", false},
		{"sluice.*.a", "sluice.x.a", true},
		{"sluice.*.a", "sluice.x.b", false},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{">", "x", true},
	} {
		if got := subjectMatch(c.pattern, c.subject); got != c.want {
			t.Errorf("%s ~ %s: %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
	if ChangesData(Frame{Subject: "sluice.changes._tick"}) || !ChangesData(Frame{Subject: "sluice.changes.public.x"}) {
		t.Error("ChangesData must select table subjects and not the tick")
	}
	batch := Frame{Subject: "sluice.changes.public.x", Header: map[string]string{"Sluice-First": "0/10:2", "Sluice-Last": "0/20:1"}}
	for pos, want := range map[string]bool{"0/10:1": false, "0/10:2": true, "0/18:9": true, "0/20:1": true, "0/20:2": false} {
		p, err := proto.ParsePosition(pos)
		if err != nil {
			t.Fatal(err)
		}
		if Covers(p)(batch) != want {
			t.Errorf("Covers(%s) of 0/10:2..0/20:1: %v, want %v", pos, !want, want)
		}
	}
}

func stored(t *testing.T, ctx context.Context, st jetstream.Stream) []string {
	t.Helper()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	return ids
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
