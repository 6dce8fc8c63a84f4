package natsx

import (
	"context"
	"fmt"
	"time"

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
// It is idempotent.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg config.Config) error {
	for _, sc := range StreamConfigs(cfg) {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("ensuring stream %s: %w", sc.Name, err)
		}
	}
	return nil
}
