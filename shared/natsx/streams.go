package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
)

// Stream limits that are not configurable.
const (
	DuplicateWindow = 2 * time.Minute
	DLQMaxAge       = 7 * 24 * time.Hour
)

// StreamConfigs returns the configurations of CHANGES, ROUTED, PACKS, DLQ
// and REPLAY.
func StreamConfigs(cfg config.Config) []jetstream.StreamConfig {
	n := cfg.NATS
	mk := func(name, subject, desc string, maxAge time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    []string{subject},
			Storage:     jetstream.FileStorage,
			Replicas:    max(n.Replicas, 1),
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      maxAge,
			MaxBytes:    int64(n.MaxBytes),
			MaxMsgs:     -1,
			Discard:     jetstream.DiscardNew,
			Duplicates:  DuplicateWindow,
			MaxMsgSize:  int32(n.MaxPayload),
		}
	}
	return []jetstream.StreamConfig{
		mk(proto.StreamChanges, proto.SubjectChangesAll, "sluice: source changes, reader -> router", n.MaxAge),
		mk(proto.StreamRouted, proto.SubjectRoutedAll, "sluice: routed changes, router -> flusher", n.MaxAge),
		mk(proto.StreamPacks, proto.SubjectPacksAll, "sluice: pack events, flusher -> indexer", n.MaxAge),
		mk(proto.StreamDLQ, proto.SubjectDLQAll, "sluice: dead letters, any stage -> operator", DLQMaxAge),
		replay(mk(proto.StreamReplay, proto.SubjectReplayAll, "sluice: replayed router dead letters, operator -> router", n.MaxAge)),
	}
}

// ReplayMaxBytes caps REPLAY below nats.max_bytes: it holds only replays
// in flight, and every stream's MaxBytes is reserved against the server's
// max_file_store.
const ReplayMaxBytes = 256 << 20

// replay is REPLAY's configuration: work-queue retention, so what the
// router has acked is gone without a trim (no frontier reads it: a replayed
// change is one a snapshot already went past).
func replay(sc jetstream.StreamConfig) jetstream.StreamConfig {
	sc.Retention = jetstream.WorkQueuePolicy
	if sc.MaxBytes <= 0 || sc.MaxBytes > ReplayMaxBytes {
		sc.MaxBytes = ReplayMaxBytes
	}
	return sc
}

// EnsureStreams creates the streams or updates them to StreamConfigs(cfg).
// It is idempotent, and it changes nothing it need not: a stream whose
// configuration already matches is left alone. On a NATS cluster an update
// is a proposal to the meta group that then waits for the stream's own
// leader, so a service (re)starting while one stream has lost its quorum
// would otherwise fail to start over a change it does not make. While
// JetStream does not answer (a cluster without a meta or stream leader, or
// no server reachable) it retries with backoff until ctx ends, then returns
// the last failure wrapped with ErrJetStreamUnavailable; any other failure
// (a configuration the server refuses) returns at once.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg config.Config) error {
	for _, sc := range StreamConfigs(cfg) {
		for attempt := 1; ; attempt++ {
			actx, cancel := context.WithTimeout(ctx, ensureAttemptTimeout)
			err := ensureStream(actx, js, sc)
			cancel()
			if err == nil {
				break
			}
			if !streamUnavailable(err) || ensureUnsafeNoWait {
				return fmt.Errorf("ensuring stream %s: %w", sc.Name, err)
			}
			if attempt == 1 || attempt%10 == 0 {
				// The caller's logger is not at hand (the service's own is
				// set up beside this call): the default one still lands in
				// the process's log.
				slog.Warn("JetStream unavailable: waiting for it to provision the stream (no quorum in the NATS cluster or no leader for the stream)",
					"stream", sc.Name, "attempt", attempt, "error", err)
			}
			if !Sleep(ctx, Backoff(min(attempt, 6))) {
				return fmt.Errorf("ensuring stream %s: %w: %w (gave up after %d attempts)", sc.Name, ErrJetStreamUnavailable, err, attempt)
			}
		}
	}
	return nil
}

// ensureAttemptTimeout bounds one stream's read and create or update.
const ensureAttemptTimeout = 5 * time.Second

// Negative-control switches of TestEnsureStreamsLeavesUnchanged and
// TestEnsureStreamsWaitsForJetStream: update every stream, and fail at the
// first unavailability.
var ensureUnsafeAlwaysUpdate, ensureUnsafeNoWait bool

func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateOrUpdateStream(ctx, sc)
		return err
	}
	if err != nil {
		return err
	}
	if !ensureUnsafeAlwaysUpdate && sameStreamConfig(s.CachedInfo().Config, sc) {
		return nil
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// sameStreamConfig reports whether the server's configuration have already
// has every field StreamConfigs sets in want (a field want leaves zero
// takes the server's default, which is not compared; a limit of 0 or
// less is the server's -1, unlimited). It compares by reflection so that a
// field StreamConfigs sets later is compared without a change here.
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
	for _, p := range []struct{ h, w *int64 }{{&have.MaxBytes, &want.MaxBytes}, {&have.MaxMsgs, &want.MaxMsgs}} {
		if *p.h <= 0 && *p.w <= 0 {
			*p.h, *p.w = -1, -1
		}
	}
	if have.MaxMsgSize <= 0 && want.MaxMsgSize <= 0 {
		have.MaxMsgSize, want.MaxMsgSize = -1, -1
	}
	hv, wv := reflect.ValueOf(have), reflect.ValueOf(want)
	for i := range wv.NumField() {
		if w := wv.Field(i); !w.IsZero() && !reflect.DeepEqual(hv.Field(i).Interface(), w.Interface()) {
			return false
		}
	}
	return true
}

// streamUnavailable reports whether err says JetStream did not answer in
// time, or answered that it cannot now (no leader, no quorum, no placement
// while nodes are down), rather than refusing the request. A server
// without JetStream (no responders) is a configuration error, not waited
// for.
func streamUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10008, // JetStream system temporarily unavailable
			10009, // JetStream cluster can not handle request
			10005, // no suitable peers for placement
			10118: // stream is offline
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
