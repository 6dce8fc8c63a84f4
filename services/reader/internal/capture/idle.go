package capture

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
)

type idleObs struct {
	at   time.Time
	wend proto.LSN
}

// settle is how long a keepalive's WAL end must stand before the reader
// confirms it. The server reports how far it has read; a commit record that
// straddles a WAL flush boundary can still be in decoding for a moment. It
// is flushed with the commit and decoded within milliseconds, so a position
// that stood this long with nothing received before it is complete.
func (s *session) settle() time.Duration { return max(2*s.o.StatusInterval, 500*time.Millisecond) }

func (s *session) observeIdle(w proto.LSN, now time.Time) {
	if n := len(s.idleObs); (n > 0 && w <= s.idleObs[n-1].wend) || w <= s.idleEnd {
		return
	}
	if len(s.idleObs) >= 64 {
		s.idleObs[len(s.idleObs)-1] = idleObs{now, w} // bounded: keep the newest
		return
	}
	s.idleObs = append(s.idleObs, idleObs{now, w})
}

func (s *session) settleIdle(now time.Time) {
	n := 0
	for n < len(s.idleObs) && now.Sub(s.idleObs[n].at) >= s.settle() {
		s.idleEnd = max(s.idleEnd, s.idleObs[n].wend)
		n++
	}
	s.idleObs = append(s.idleObs[:0], s.idleObs[n:]...)
}

// idle publishes a tick when nothing is buffered or pending, so the
// confirmed LSN (and the pipeline's frontier) reach the server's position.
func (s *session) idle(ctx context.Context, now time.Time) error {
	if s.inTx || s.inStream || s.groupRows > 0 || s.tracker.Pending() > 0 {
		return nil
	}
	s.oldestPending = time.Time{}
	s.settleIdle(now)
	at := max(s.clean, s.idleEnd)
	if at <= proto.LSN(s.tracker.Confirmed()) || at <= s.lastTick {
		return nil
	}
	s.lastTick, s.tickAt = at, now
	s.clean = at
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderThrough, at.String())
	id := proto.TickMsgID(at)
	h.Set(proto.HeaderMsgID, id)
	return s.send(ctx, Out{Msg: &nats.Msg{Subject: proto.SubjectTick, Header: h}, ID: id, Through: at})
}
