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
// "Frontiers"), pipelined: every Step takes a new sample (L, S1) while
// earlier ones are still being proven, and each sample goes through the
// stages on its own (flushers past S1, then S2 sampled, then the indexer
// past S2). Samples are proven in the order taken (S1 and S2 only grow),
// so a change waits for one proof, not for the proof under way and then
// its own (about a flush interval each). It is driven by Step from one
// goroutine; State may be read from any.
type Frontier struct {
	js         jetstream.JetStream
	partitions int

	mu      sync.Mutex       // guards the fields below for State
	samples []frontierSample // oldest first, at most maxSamples
	through proto.LSN        // the highest L proven
}

// frontierSample is one L being proven: stage 1 waits for the flushers to
// pass s1, stage 2 for the indexer to pass s2.
type frontierSample struct {
	l      proto.LSN
	s1, s2 uint64
	stage  int
}

// maxSamples bounds the samples under proof (a Step every publisher
// interval, proofs about a flush interval long: a few are under way).
const maxSamples = 32

// NewFrontier returns a frontier over the pipeline's streams and consumers.
func NewFrontier(js jetstream.JetStream, partitions int) *Frontier {
	return &Frontier{js: js, partitions: partitions}
}

var stageNames = []string{"sampling router", "waiting for flushers", "waiting for indexer"}

// State returns the stage of the oldest sample under proof and the L it
// is proving.
func (f *Frontier) State() (string, proto.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.samples) == 0 {
		return stageNames[0], f.through
	}
	return stageNames[f.samples[0].stage], f.samples[0].l
}

// Through returns the highest LSN proven so far.
func (f *Frontier) Through() proto.LSN {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.through
}

// Step takes a new sample (when L moved past the newest one), moves every
// sample as far as the consumer states read now allow, and returns the
// highest proven LSN. Each consumer's state is read once per Step, after
// the samples it is checked against were taken.
func (f *Frontier) Step(ctx context.Context) (proto.LSN, error) {
	f.mu.Lock()
	n := len(f.samples)
	var newest proto.LSN
	if n > 0 {
		newest = f.samples[n-1].l
	}
	f.mu.Unlock()
	var sampleErr error
	if n < maxSamples {
		l, s1, err := f.sample(ctx)
		switch {
		case err != nil:
			sampleErr = err // the samples taken before still move
		case n == 0 || l > newest:
			f.mu.Lock()
			f.samples = append(f.samples, frontierSample{l: l, s1: s1, stage: 1})
			f.mu.Unlock()
		}
	}
	if err := f.flushersStep(ctx); err != nil {
		return f.Through(), err
	}
	if err := f.indexerStep(ctx); err != nil {
		return f.Through(), err
	}
	return f.Through(), sampleErr
}

// waiting returns the S (s1 or s2) of the oldest sample at stage, or
// false when none is.
func (f *Frontier) waiting(stage int) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.samples {
		if s.stage == stage {
			if stage == 1 {
				return s.s1, true
			}
			return s.s2, true
		}
	}
	return 0, false
}

// flushersStep moves every sample whose S1 all the flushers passed to
// stage 2, with S2 = PACKS' last sequence read after that was seen.
func (f *Frontier) flushersStep(ctx context.Context) error {
	if _, ok := f.waiting(1); !ok {
		return nil
	}
	floors := make([]floor, f.partitions)
	for p := range f.partitions {
		fl, err := f.floor(ctx, proto.StreamRouted, proto.ConsumerFlusher(p))
		if err != nil {
			return err
		}
		floors[p] = fl
	}
	passed := func(s1 uint64) bool {
		for _, fl := range floors {
			if !fl.passed(s1) {
				return false
			}
		}
		return true
	}
	if s1, _ := f.waiting(1); !passed(s1) {
		return nil
	}
	s2, err := f.lastSeq(ctx, proto.StreamPacks)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.samples {
		if s := &f.samples[i]; s.stage == 1 && passed(s.s1) {
			s.s2, s.stage = s2, 2
		}
	}
	return nil
}

// indexerStep proves every sample whose S2 the indexer passed.
func (f *Frontier) indexerStep(ctx context.Context) error {
	if _, ok := f.waiting(2); !ok {
		return nil
	}
	fl, err := f.floor(ctx, proto.StreamPacks, proto.ConsumerIndexer)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := 0
	for k < len(f.samples) && f.samples[k].stage == 2 && fl.passed(f.samples[k].s2) {
		f.through = max(f.through, f.samples[k].l)
		k++
	}
	f.samples = append(f.samples[:0], f.samples[k:]...)
	return nil
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

// floor is a consumer's state as the frontier reads it.
type floor struct {
	ackFloor uint64 // stream sequence
	idle     bool   // nothing pending, nothing awaiting an ack
	missing  bool   // the consumer does not exist (it has not passed)
}

// passed reports whether the consumer has an ack floor at or past seq, or
// nothing pending.
func (fl floor) passed(seq uint64) bool {
	return !fl.missing && (fl.ackFloor >= seq || fl.idle)
}

// floor reads consumer name on stream.
func (f *Frontier) floor(ctx context.Context, stream, name string) (floor, error) {
	cons, err := f.js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return floor{missing: true}, nil
	}
	if err != nil {
		return floor{}, fmt.Errorf("sampling frontier: consumer %s: %w", name, err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return floor{}, fmt.Errorf("sampling frontier: consumer %s: %w", name, err)
	}
	return floor{ackFloor: ci.AckFloor.Stream, idle: ci.NumPending == 0 && ci.NumAckPending == 0}, nil
}
