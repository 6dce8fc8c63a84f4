package proto

import (
	"fmt"
	"strconv"
	"strings"
)

// Stream names.
const (
	StreamChanges = "CHANGES" // reader -> router, one subject per source table
	StreamRouted  = "ROUTED"  // router -> flusher, one subject per (partition, destination)
	StreamPacks   = "PACKS"   // flusher -> indexer, one subject per destination
	StreamDLQ     = "DLQ"     // any stage -> operator, one subject per stage
	// StreamReplay carries the replays of router dead letters (`sluice dlq
	// replay`) to the router. They cannot go back to CHANGES: every reader
	// publish to CHANGES names the stream's last message id
	// (Nats-Expected-Last-Msg-Id), so a message from anyone else there
	// fails the reader's next publish and restarts its session.
	StreamReplay = "REPLAY" // operator -> router, one subject per source table
)

// Subject prefixes and wildcards.
const (
	SubjectChangesAll = "sluice.changes.>"
	SubjectRoutedAll  = "sluice.routed.>"
	SubjectPacksAll   = "sluice.packs.>"
	SubjectDLQAll     = "sluice.dlq.>"
	SubjectReplayAll  = "sluice.replay.>"

	// SubjectTick carries the reader's idle ticks on CHANGES. It has a single
	// token after the prefix, so it can never collide with a table subject
	// (schema.table is always two tokens).
	SubjectTick = "sluice.changes._tick"
)

// Durable consumer names.
const (
	ConsumerRouter  = "router"
	ConsumerIndexer = "indexer"
	// ConsumerRouterReplay is the router's consumer of REPLAY.
	ConsumerRouterReplay = "router-replay"
)

// ConsumerFlusher is the durable consumer that owns one ROUTED partition.
func ConsumerFlusher(partition int) string { return "flusher-p" + strconv.Itoa(partition) }

// ChangesSubject is the CHANGES subject of a source table ("schema.table").
func ChangesSubject(table string) string { return "sluice.changes." + table }

// TableFromChangesSubject inverts ChangesSubject; ok is false for ticks and
// foreign subjects.
func TableFromChangesSubject(subject string) (table string, ok bool) {
	t, ok := strings.CutPrefix(subject, "sluice.changes.")
	if !ok || strings.Count(t, ".") != 1 {
		return "", false
	}
	return t, true
}

// ReplaySubject is the REPLAY subject that stands in for a CHANGES subject
// ("sluice.changes.public.t" -> "sluice.replay.changes.public.t"); ok is
// false for a subject that is not on CHANGES.
func ReplaySubject(changesSubject string) (subject string, ok bool) {
	rest, ok := strings.CutPrefix(changesSubject, "sluice.changes.")
	if !ok || rest == "" {
		return "", false
	}
	return "sluice.replay.changes." + rest, true
}

// RoutedSubject is the ROUTED subject of a destination in its partition.
func RoutedSubject(partition int, destination string) string {
	return "sluice.routed." + strconv.Itoa(partition) + "." + destination
}

// RoutedPartitionFilter is the filter subject of one partition's consumer.
func RoutedPartitionFilter(partition int) string {
	return "sluice.routed." + strconv.Itoa(partition) + ".>"
}

// ParseRoutedSubject returns the partition and destination of a ROUTED subject.
func ParseRoutedSubject(subject string) (partition int, destination string, err error) {
	rest, ok := strings.CutPrefix(subject, "sluice.routed.")
	if !ok {
		return 0, "", fmt.Errorf("subject %q is not a ROUTED subject", subject)
	}
	p, d, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", fmt.Errorf("subject %q has no destination token", subject)
	}
	partition, err = strconv.Atoi(p)
	if err != nil {
		return 0, "", fmt.Errorf("subject %q: bad partition token: %w", subject, err)
	}
	if err := ValidateDestination(d); err != nil {
		return 0, "", fmt.Errorf("subject %q: %w", subject, err)
	}
	return partition, d, nil
}

// PacksSubject is the PACKS subject of a destination.
func PacksSubject(destination string) string { return "sluice.packs." + destination }

// DLQSubject is the dead-letter subject of a stage (reader, router, flusher,
// indexer, publisher).
func DLQSubject(stage string) string { return "sluice.dlq." + stage }
