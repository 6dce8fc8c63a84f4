package reader

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
)

// failedFuture is a publish the broker refused, its error delivered once
// release is closed.
type failedFuture struct {
	msg     *nats.Msg
	release chan struct{}
}

func (f failedFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f failedFuture) Err() <-chan error {
	ch := make(chan error, 1)
	go func() { <-f.release; ch <- errors.New("injected: publish refused") }()
	return ch
}
func (f failedFuture) Msg() *nats.Msg { return f.msg }

// orderScenario refuses the third data message (a fake, only for this
// fault: the broker refusing one publish, e.g. a transient error, while the
// next one is already on the wire) and reports whether CHANGES ends up
// out of position order after the reader recovered.
func orderScenario(t *testing.T, unchained bool) (reordered bool) {
	e := newEnv(t, "public.items")
	e.cfg.Reader.BatchRows = 1
	e.exec(schemaSQL)
	var n atomic.Int64
	release := make(chan struct{})
	var once atomic.Bool
	hook := func(real capture.PublishFunc) capture.PublishFunc {
		return func(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
			if msg.Subject == proto.SubjectTick || once.Load() {
				return real(msg, opts...)
			}
			switch k := n.Add(1); {
			case k == 3:
				return failedFuture{msg, release}, nil
			case k == 4:
				f, err := real(msg, opts...)
				close(release) // the refusal is reported after 4 went out
				once.Store(true)
				return f, err
			default:
				return real(msg, opts...)
			}
		}
	}
	run := e.start(e.newReader("a", func(r *Reader) { r.publishHook = hook; r.rules.unchained = unchained }))
	waitStreaming(t, run)
	e.exec(`INSERT INTO items SELECT 't', g, 'v' FROM generate_series(1, 8) g`)
	rows := waitRows(t, e, 8)
	var prev proto.Position
	for _, r := range rows {
		if r.pos.Less(prev) {
			reordered = true
			t.Logf("row %s stored after %s", r.pos, prev)
		}
		prev = r.pos
	}
	ids := map[int64]bool{}
	for _, r := range rows {
		ids[r.vals["id"].(int64)] = true
	}
	if len(ids) != 8 {
		t.Errorf("ids %v", ids)
	}
	return reordered
}

func TestPublishOrderAfterRefusal(t *testing.T) {
	if orderScenario(t, false) {
		t.Fatal("CHANGES out of position order after a refused publish")
	}
}

// The same without the Nats-Expected-Last-Sequence chain: must reorder.
func TestPublishOrderNegativeControl(t *testing.T) {
	if !orderScenario(t, true) {
		t.Fatal("negative control: no reordering without the chain; the scenario no longer exercises it")
	}
	t.Log("unchained publishing reordered CHANGES (expected)")
}
