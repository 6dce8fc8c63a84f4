package indexer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// HeaderPackPath names the pack a dead letter of the reconciler is about;
// HeaderStoreID its store.
const (
	HeaderPackPath = proto.HeaderPackPath
	HeaderStoreID  = "Sluice-Store-Id"
)

// deadLetterPath records a pack the reconciler found in the store and
// cannot index. No stream message stands behind it, so the dead letter is
// the pack event the flusher would have published, addressed to its
// PACKS subject (a replay has the indexer check the pack again, say once
// an operator restored it), with the path and store in headers besides the
// reason. Its message id is derived from the store and path: a later sweep
// of the same file is deduplicated, two files never are.
func (ix *Indexer) deadLetterPath(ctx context.Context, path string, size int64, reason error) error {
	storeID := ix.deps.Packs.ID()
	dest, rest, _ := strings.Cut(path, "/")
	table, _, _ := strings.Cut(rest, "/")
	subject := proto.PacksSubject(dest)
	if packstore.IsSegmentPath(path) {
		// .seg/<day>/<hour>/<table>/<id>.arrow: the segment's event names
		// its table and no destination (see matchDestinations).
		parts := strings.Split(path, "/")
		dest, table = "", parts[len(parts)-2]
		subject = proto.SegmentEventSubject(table)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, proto.PackEventSchema)
	for i, v := range []string{packIDOf(path), storeID, dest, table, path, "", "", ""} {
		b.Field(i).(*array.StringBuilder).Append(v)
	}
	b.Field(8).(*array.Int64Builder).Append(0)
	b.Field(9).(*array.Int64Builder).Append(0)
	b.Field(10).(*array.Int64Builder).Append(size)
	rec := b.NewRecordBatch()
	b.Release()
	body, err := arrowcodec.Encode(rec)
	rec.Release()
	if err != nil {
		return fmt.Errorf("encoding the dead letter of pack %s: %w", path, err)
	}
	hdr := nats.Header{}
	hdr.Set(proto.HeaderWire, proto.WireVersion)
	hdr.Set(proto.HeaderOrigSubject, subject)
	hdr.Set(proto.HeaderDestination, dest)
	hdr.Set(proto.HeaderTable, table)
	hdr.Set(HeaderPackPath, path)
	hdr.Set(HeaderStoreID, storeID)
	// A halt of the pack's destinations (docs/adr/0034-corrupt-pack-halts.md):
	// a segment's are unknown here (0), a pack's is its one.
	n := 1
	if dest == "" {
		n = 0
	} else {
		hdr.Set(proto.HeaderHaltDestinationsHash, proto.DestinationsHash([]string{dest}))
	}
	hdr.Set(proto.HeaderHaltDestinations, strconv.Itoa(n))
	return ix.dlq.SendDataWithID(ctx, "pack:"+storeID+":"+path, body, hdr, reason)
}

// reconciler indexes every pack in the store that the inventory lacks, at
// start and every reconcile_interval (a pack missing at start is indexed by
// the next pass, if its event has not come by then: see Reconcile).
func (ix *Indexer) reconciler(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ix.cleanTemp(ctx)
		n, err := ix.Reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			ix.log.Warn("reconciling pack store failed", "err", err)
			ix.setErr(err)
		} else if n > 0 {
			ix.log.Info("reconciler indexed packs missing from the inventory", "packs", n)
		}
		t.Reset(ix.cfg.Indexer.ReconcileInterval)
	}
}

// tempCleaner is a pack store that leaves temporary files behind when a
// writer is killed (packstore.DirStore).
type tempCleaner interface {
	CleanTemp(ctx context.Context, maxAge time.Duration) (int, error)
}

// cleanTempEvery is how often the reconciler removes stale temporary files
// (at start, then at most this often).
const cleanTempEvery = 10 * time.Minute

// cleanTemp removes the temporary files killed writers left in the pack
// store (older than packstore.TempMaxAge), at the first pass and then every
// cleanTempEvery. Only the reconciler goroutine calls it.
func (ix *Indexer) cleanTemp(ctx context.Context) {
	c, ok := ix.deps.Packs.(tempCleaner)
	if !ok || (!ix.lastClean.IsZero() && time.Since(ix.lastClean) < cleanTempEvery) {
		return
	}
	ix.lastClean = time.Now()
	n, err := c.CleanTemp(ctx, 0)
	if err != nil && ctx.Err() == nil {
		ix.log.Warn("removing stale temporary files from the pack store failed", "err", err)
	} else if n > 0 {
		ix.log.Info("removed temporary files of interrupted pack writes", "files", n, "older_than", packstore.TempMaxAge)
	}
}

// Reconcile lists the pack store and indexes the packs missing from the
// inventory that were missing at the previous pass too, returning how many
// it indexed. A pack missing once is usually one whose event the consumer
// has not reached yet (under load, thousands): indexing it here would race
// the consumer for nothing. A pack missing at two passes a
// reconcile_interval apart is one whose event was lost. The listing is
// checked against the inventory in chunks, so a pass holds one chunk and
// the suspects, never the whole store's paths.
//
// The listing is incremental: the per-destination layout (packs of the
// format before segments, which nothing writes any more) is listed at the
// first pass only, and the segments from the hour before the latest
// segment time the previous pass listed (segmentsAfter), so a pass reads
// the newest hours, not the whole store. A suspect the listing does not
// reach again is checked by its path.
func (ix *Indexer) Reconcile(ctx context.Context) (int, error) {
	storeID := ix.deps.Packs.ID()
	if !ix.badLoaded {
		if err := ix.loadDeadLettered(ctx, storeID); err != nil {
			return 0, fmt.Errorf("reading the files already dead-lettered: %w", err)
		}
		ix.badLoaded = true
	}
	var batch []item
	var rows int64
	total := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		refs := make([]catalog.PackRef, len(batch))
		for i, it := range batch {
			refs[i] = it.ref
		}
		st, err := ix.indexRefs(ctx, refs)
		if err != nil && len(batch) > 1 {
			// One pack may be what fails: index them one by one, so it
			// cannot hold the others back at every pass.
			st, err = catalog.IndexStats{}, nil
			for _, it := range batch {
				one, e := ix.indexRefs(ctx, []catalog.PackRef{it.ref})
				switch {
				case e == nil:
					st.Packs += one.Packs
					st.Rows += one.Rows
				case permanent(e):
					ix.markBad(it.ref.Path)
					ix.deadLetter(ctx, it, e)
				case err == nil:
					err = e
				}
			}
		} else if err != nil && permanent(err) {
			ix.markBad(batch[0].ref.Path)
			ix.deadLetter(ctx, batch[0], err)
			batch, rows = nil, 0
			return nil
		}
		if err != nil {
			return err
		}
		total += st.Packs
		ix.m.reconciled.Add(float64(st.Packs))
		ix.m.packs.Add(float64(st.Packs))
		ix.m.rows.Add(float64(st.Rows))
		ix.mu.Lock()
		ix.status.Packs += int64(st.Packs)
		ix.status.Rows += int64(st.Rows)
		ix.status.Reconciled += int64(st.Packs)
		ix.mu.Unlock()
		batch, rows = nil, 0
		return nil
	}
	prev := ix.suspects
	next := map[string]bool{}
	var chunk []string
	check := func() error {
		if len(chunk) == 0 {
			return nil
		}
		keys := make([]catalog.PackKey, len(chunk))
		for i, path := range chunk {
			keys[i] = catalog.PackKey{StoreID: storeID, PackID: packIDOf(path)}
		}
		done, err := ix.cat.Indexed(ctx, keys)
		if err != nil {
			return err
		}
		paths := chunk
		chunk = chunk[:0]
		for i, path := range paths {
			if done[keys[i]] {
				continue
			}
			if !prev[path] {
				if len(next) < maxSuspects {
					next[path] = true
				}
				continue
			}
			ref, err := ix.cat.ReadRef(ctx, ix.deps.Packs, path)
			if errors.Is(err, packstore.ErrNotFound) {
				continue // a suspect checked by its path, gone since
			}
			if errors.Is(err, packstore.ErrCorruptPack) || errors.Is(err, catalog.ErrPackMismatch) {
				ix.markBad(path)
				ix.deadLetter(ctx, item{ref: catalog.PackRef{Path: path}}, err)
				continue
			}
			if err != nil {
				return err
			}
			batch = append(batch, item{ref: ref})
			rows += ref.Meta.Rows
			if rows >= int64(ix.cfg.Indexer.BatchRows) || len(batch) >= maxBatchPacks {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	relisted := map[string]bool{} // suspects of prev listed again
	// hw is the latest segment time listed, never past this indexer's
	// clock: a writer whose clock runs ahead must not move the next pass's
	// start past the segments of the others.
	var hw time.Time
	started := time.Now()
	visit := func(path string) error {
		if packstore.IsSegmentPath(path) {
			if t, err := proto.SegmentTime(packIDOf(path)); err == nil && t.After(hw) {
				if t.After(started) {
					t = started
				}
				hw = t
			}
		}
		if prev[path] {
			relisted[path] = true
		}
		if ix.isBad(path) {
			return nil
		}
		chunk = append(chunk, path)
		if len(chunk) >= reconcileChunk {
			return check()
		}
		return nil
	}
	var err error
	legacy := !ix.legacyListed
	if legacy {
		err = ix.deps.Packs.List(ctx, "", visit)
	}
	if err == nil {
		err = packstore.ListAfter(ctx, ix.deps.Packs, proto.SegmentsDir+"/", ix.segmentsAfter(), visit)
	}
	for path := range prev {
		if err != nil {
			break
		}
		if !relisted[path] && !ix.isBad(path) {
			chunk = append(chunk, path)
			if len(chunk) >= reconcileChunk {
				err = check()
			}
		}
	}
	if err == nil {
		err = check()
	}
	if err == nil {
		err = flush()
	}
	if err == nil {
		ix.legacyListed = ix.legacyListed || legacy
		if hw.After(ix.segmentsHW) {
			ix.segmentsHW = hw
		}
	}
	ix.suspects = next
	ix.mu.Lock()
	ix.status.LastReconcile = time.Now()
	ix.mu.Unlock()
	if err != nil {
		return total, fmt.Errorf("reconciling pack store: %w", err)
	}
	return total, nil
}

// segmentsAfter is where a pass starts listing segments: after the hour
// directory of the hour before the latest segment time the previous passes
// listed (so that hour and every later one are listed; a segment is cut
// and written within seconds), or from the start when none was listed yet.
func (ix *Indexer) segmentsAfter() string {
	if ix.segmentsHW.IsZero() {
		return ""
	}
	return proto.SegmentHourDir(ix.segmentsHW.Add(-time.Hour))
}

// reconcileChunk is how many listed paths one inventory query checks;
// maxSuspects bounds the packs a pass remembers as missing (more wait for
// a later pass).
const (
	reconcileChunk = 1000
	maxSuspects    = 100_000
)

// packIDOf is the pack id of a store path <destination>/<table>/<id>.arrow.
func packIDOf(path string) string {
	return strings.TrimSuffix(path[strings.LastIndexByte(path, '/')+1:], ".arrow")
}

// maxDeadLetteredScan bounds the dead letters loadDeadLettered reads.
const maxDeadLetteredScan = 100_000

// loadDeadLettered marks bad every file of store storeID that a dead letter
// of the indexer in the DLQ already names: a restarted indexer does not
// dead-letter it again once JetStream's duplicate window (2 minutes) has
// passed, which would list one more halt of its destinations per restart.
// A file whose dead letter was replayed or purged is checked again.
func (ix *Indexer) loadDeadLettered(ctx context.Context, storeID string) error {
	stream, err := ix.deps.JS.Stream(ctx, proto.StreamDLQ)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	info, err := stream.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return err
	}
	n := 0
	err = natsx.ScanStream(ctx, stream, proto.DLQSubject("indexer"), int(min(info.State.Msgs, maxDeadLetteredScan)), time.Second, func(_ uint64, _ time.Time, m jetstream.Msg) {
		if path := m.Headers().Get(HeaderPackPath); path != "" && m.Headers().Get(HeaderStoreID) == storeID {
			ix.markBad(path)
			n++
		}
	})
	if n > 0 {
		ix.log.Info("files already dead-lettered are not checked again until replayed or purged", "files", n)
	}
	return err
}

func (ix *Indexer) markBad(path string) {
	ix.mu.Lock()
	ix.bad[path] = true
	ix.mu.Unlock()
}

func (ix *Indexer) isBad(path string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.bad[path]
}
