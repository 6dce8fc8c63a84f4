package publisher

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
)

// Frontier is the through_lsn sampling state machine (ARCHITECTURE.md
// "Frontiers"). It is driven by Step from one goroutine; State may be read
// from any.
type Frontier struct {
	js         jetstream.JetStream
	partitions int

	mu      sync.Mutex // guards the fields below for State
	stage   int        // 0 sample L and S1, 1 wait for flushers >= S1, 2 wait for the indexer >= S2
	target  proto.LSN  // L being proven
	s1, s2  uint64
	through proto.LSN // the highest L proven
}

// NewFrontier returns a frontier over the pipeline's streams and consumers.
func NewFrontier(js jetstream.JetStream, partitions int) *Frontier {
	return &Frontier{js: js, partitions: partitions}
}

var stageNames = []string{"sampling router", "waiting for flushers", "waiting for indexer"}

// State returns the current stage and the L it is proving.
func (f *Frontier) State() (string, proto.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return stageNames[f.stage], f.target
}

// Through returns the highest LSN proven so far.
func (f *Frontier) Through() proto.LSN {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.through
}

// Step advances the state machine as far as the current consumer states
// allow (at most one full cycle) and returns the highest proven LSN.
func (f *Frontier) Step(ctx context.Context) (proto.LSN, error) {
	for range 3 {
		f.mu.Lock()
		stage := f.stage
		f.mu.Unlock()
		switch stage {
		case 0:
			l, s1, err := f.sample(ctx)
			if err != nil {
				return f.Through(), err
			}
			f.mu.Lock()
			f.target, f.s1, f.stage = l, s1, 1
			f.mu.Unlock()
		case 1:
			ok, err := f.flushersPassed(ctx)
			if err != nil || !ok {
				return f.Through(), err
			}
			s2, err := f.lastSeq(ctx, proto.StreamPacks)
			if err != nil {
				return f.Through(), err
			}
			f.mu.Lock()
			f.s2, f.stage = s2, 2
			f.mu.Unlock()
		case 2:
			f.mu.Lock()
			s2 := f.s2
			f.mu.Unlock()
			ok, err := f.passed(ctx, proto.StreamPacks, proto.ConsumerIndexer, s2)
			if err != nil || !ok {
				return f.Through(), err
			}
			f.mu.Lock()
			f.through = max(f.through, f.target)
			f.stage = 0
			through := f.through
			f.mu.Unlock()
			return through, nil
		}
	}
	return f.Through(), nil
}

// sample reads L (the Sluice-Through of the message at the router's ack
// floor on CHANGES) and then ROUTED's last sequence S1.
func (f *Frontier) sample(ctx context.Context) (proto.LSN, uint64, error) {
	changes, err := f.js.Stream(ctx, proto.StreamChanges)
	if err != nil {
		return 0, 0, fmt.Errorf("sampling frontier: %w", err)
	}
	var l proto.LSN
	floor := uint64(0)
	cons, err := changes.Consumer(ctx, proto.ConsumerRouter)
	switch {
	case err == nil:
		ci, err := cons.Info(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("sampling frontier: router consumer: %w", err)
		}
		floor = ci.AckFloor.Stream
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		si, err := changes.Info(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("sampling frontier: %w", err)
		}
		if si.State.Msgs > 0 || si.State.LastSeq > 0 {
			return 0, 0, fmt.Errorf("sampling frontier: CHANGES holds messages but consumer %s does not exist", proto.ConsumerRouter)
		}
	default:
		return 0, 0, fmt.Errorf("sampling frontier: router consumer: %w", err)
	}
	if floor > 0 {
		msg, err := changes.GetMsg(ctx, floor)
		if err != nil {
			return 0, 0, fmt.Errorf("sampling frontier: reading CHANGES message %d at the router's ack floor: %w", floor, err)
		}
		v := msg.Header.Get(proto.HeaderThrough)
		if l, err = proto.ParseLSN(v); err != nil {
			return 0, 0, fmt.Errorf("sampling frontier: CHANGES message %d: header %s: %w", floor, proto.HeaderThrough, err)
		}
	}
	s1, err := f.lastSeq(ctx, proto.StreamRouted)
	if err != nil {
		return 0, 0, err
	}
	return l, s1, nil
}

func (f *Frontier) lastSeq(ctx context.Context, stream string) (uint64, error) {
	s, err := f.js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("sampling frontier: stream %s: %w", stream, err)
	}
	si, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("sampling frontier: stream %s: %w", stream, err)
	}
	return si.State.LastSeq, nil
}

func (f *Frontier) flushersPassed(ctx context.Context) (bool, error) {
	f.mu.Lock()
	s1 := f.s1
	f.mu.Unlock()
	for p := range f.partitions {
		ok, err := f.passed(ctx, proto.StreamRouted, proto.ConsumerFlusher(p), s1)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// passed reports whether consumer name on stream has an ack floor at or
// past seq, or nothing pending. A missing consumer has not passed.
func (f *Frontier) passed(ctx context.Context, stream, name string, seq uint64) (bool, error) {
	cons, err := f.js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sampling frontier: consumer %s: %w", name, err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("sampling frontier: consumer %s: %w", name, err)
	}
	return ci.AckFloor.Stream >= seq || (ci.NumPending == 0 && ci.NumAckPending == 0), nil
}
