package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// ErrJetStreamUnavailable marks a stream that does not answer: on a NATS
// cluster, no quorum (no meta leader, or no leader for the stream), or no
// server reachable at all.
var ErrJetStreamUnavailable = errors.New("JetStream unavailable: no quorum in the NATS cluster or no leader for the stream (publishes and fetches wait until it returns)")

// Streams are the streams sluice uses.
var Streams = []string{proto.StreamChanges, proto.StreamRouted, proto.StreamPacks, proto.StreamDLQ, proto.StreamReplay}

// StreamAvailable reads stream's info (answered by its leader) and returns
// nil, or the failure wrapped with ErrJetStreamUnavailable (a missing
// stream is not wrapped).
func StreamAvailable(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, stream)
	if err == nil {
		var info *jetstream.StreamInfo
		if info, err = s.Info(ctx); err == nil {
			if err = quorum(info); err == nil {
				return info, nil
			}
		}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	return nil, fmt.Errorf("reading stream %s: %w: %w", stream, ErrJetStreamUnavailable, err)
}

// quorum checks the stream's Raft group as its info reports it: a node
// cut off from the others may still answer with the state it has, so an
// answer alone does not prove a quorum. A stream on one server has no
// group.
func quorum(info *jetstream.StreamInfo) error {
	c := info.Cluster
	if c == nil || (c.Leader == "" && len(c.Replicas) == 0) && info.Config.Replicas <= 1 {
		return nil
	}
	if c.Leader == "" {
		return errors.New("the stream has no leader")
	}
	up := 1 // the leader
	for _, r := range c.Replicas {
		if r.Current && !r.Offline {
			up++
		}
	}
	if n := max(info.Config.Replicas, 1+len(c.Replicas)); up < n/2+1 {
		return fmt.Errorf("%d of %d replicas current", up, n)
	}
	return nil
}

// Health watches whether every stream answers, so a process says it when
// the NATS cluster has lost its quorum: the gauge
// sluice_nats_stream_available{stream} (0 or 1), one ERROR log line when a
// stream stops answering and one INFO line when it answers again, and
// Unavailable for the status API.
type Health struct {
	js     jetstream.JetStream
	log    *slog.Logger
	gauge  *prometheus.GaugeVec
	mu     sync.Mutex
	bad    map[string]string // stream -> error
	checks int               // full checks done
	stop   context.CancelFunc
	done   chan struct{}
}

// HealthInterval is how often Health checks the streams.
const HealthInterval = 5 * time.Second

// WatchHealth starts checking the streams every HealthInterval until Stop.
func WatchHealth(js jetstream.JetStream, log *slog.Logger, reg prometheus.Registerer) *Health {
	return watchHealth(js, log, reg, HealthInterval)
}

func watchHealth(js jetstream.JetStream, log *slog.Logger, reg prometheus.Registerer, every time.Duration) *Health {
	h := &Health{js: js, log: log, bad: map[string]string{}, done: make(chan struct{}),
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_nats_stream_available",
			Help: "1 while the stream answers (its leader is elected: the NATS cluster has a quorum), 0 while it does not.",
		}, []string{"stream"})}
	if reg != nil {
		h.gauge = telemetry.MustRegister(reg, h.gauge)
	}
	for _, s := range Streams {
		h.gauge.WithLabelValues(s).Set(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go h.run(ctx, every)
	return h
}

func (h *Health) run(ctx context.Context, every time.Duration) {
	defer close(h.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.check(ctx)
	}
}

func (h *Health) check(ctx context.Context) {
	defer func() {
		h.mu.Lock()
		h.checks++
		h.mu.Unlock()
	}()
	for _, s := range Streams {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := StreamAvailable(cctx, h.js, s)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		_, wasBad := h.bad[s]
		switch {
		case err != nil && errors.Is(err, ErrJetStreamUnavailable):
			h.bad[s] = err.Error()
			h.gauge.WithLabelValues(s).Set(0)
			if !wasBad {
				h.log.Error("JetStream stream unavailable: the NATS cluster has no quorum or the stream no leader", "stream", s, "error", err)
			}
		case err == nil:
			delete(h.bad, s)
			h.gauge.WithLabelValues(s).Set(1)
			if wasBad {
				h.log.Info("JetStream stream available again", "stream", s)
			}
		}
		h.mu.Unlock()
	}
}

// Unavailable returns the streams that did not answer at the last check,
// with their errors.
func (h *Health) Unavailable() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.bad))
	for k, v := range h.bad {
		out[k] = v
	}
	return out
}

// Stop ends the checks and waits for the last one.
func (h *Health) Stop() {
	h.stop()
	<-h.done
}
