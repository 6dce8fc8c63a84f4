package publisher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// The table lifecycle runs in the publisher because compaction and purge
// publish (catalog.PublishReplace), which needs the publisher lease and
// its fence, and one loop then orders them with the ordinary publishes:
// the members a compaction read at the latest snapshot are still the
// latest's when its replacement publishes. Garbage collection needs no
// fence (catalog gc.go) but runs here too, so one replica does it. Each
// job runs at most once per its interval, between publishes, one pass at a
// time (catalog.compact_max_bytes bounds a compaction pass), after the
// tick's publish, each interval counted from the end of the job's last
// pass: the pipeline's publishes wait for at most one pass, and a pass
// that outlasts its interval or loses the lease never keeps the next
// publish from running (issue 32).

// lifecycle is the publisher's compaction, GC and purge state.
type lifecycle struct {
	store       packstore.Store
	writer      string    // the compacted segments' writer token
	compactedAt time.Time // the end of the last compaction pass
	collectedAt time.Time // the end of the last GC pass
	// passHook, when set (tests only: SetCompactionHook), runs at the
	// start of each compaction pass: a slow pass on demand.
	passHook func()

	compactions, compactMembers, compactIn, compactOut prometheus.Counter
	compactSeconds, gcSeconds                          prometheus.Histogram
	gcMembers, gcFiles, gcWatermarks, gcTemp           prometheus.Counter
	purges                                             prometheus.Counter
	claims                                             *claimGC // nil: the store cannot list and delete claims
	// dlq records the member files compaction cannot read (damaged.go),
	// on the indexer's DLQ subject, where halts are read; nil without JS.
	dlq deadLetterer
}

func newLifecycle(reg prometheus.Registerer, store packstore.Store, writer string) *lifecycle {
	counter := func(name, help string) prometheus.Counter {
		return telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
	}
	hist := func(name, help string) prometheus.Histogram {
		return telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}))
	}
	return &lifecycle{
		store: store, writer: writer,
		compactions:    counter("sluice_compaction_runs_total", "Compactions published (one segment each)."),
		compactMembers: counter("sluice_compaction_members_total", "Members (pack, destination) compactions removed."),
		compactIn:      counter("sluice_compaction_input_bytes_total", "Bytes of the member files compactions read."),
		compactOut:     counter("sluice_compaction_output_bytes_total", "Bytes of the segments compactions wrote."),
		compactSeconds: hist("sluice_compaction_seconds", "Time of one compaction pass that compacted something."),
		gcSeconds:      hist("sluice_catalog_gc_seconds", "Time of one garbage collection pass."),
		gcMembers:      counter("sluice_catalog_gc_members_total", "Removed members whose rows and inventory rows garbage collection deleted."),
		gcFiles:        counter("sluice_catalog_gc_files_total", "Files garbage collection deleted from the pack store."),
		gcWatermarks:   counter("sluice_catalog_gc_watermark_rows_total", "Expired watermark rows garbage collection deleted."),
		gcTemp:         counter("sluice_catalog_gc_temp_files_total", "Temporary files of killed writes garbage collection deleted."),
		purges:         counter("sluice_catalog_purges_total", "Destinations purged."),
	}
}

// withClaims adds the claim collection (claims.go) when store can list and
// delete claims.
func (lc *lifecycle) withClaims(reg prometheus.Registerer, js jetstream.JetStream, log *slog.Logger) *lifecycle {
	if cs, ok := lc.store.(packstore.ClaimCollector); ok {
		lc.claims = newClaimGC(reg, cs, js, log)
	}
	if js != nil {
		lc.dlq = natsx.NewDeadLetter(js, "indexer")
	}
	return lc
}

// run does what is due of the lifecycle's jobs under lease l and returns
// the lease as they left it (an error only for a lost lease).
func (p *Publisher) lifecycleStep(ctx context.Context, l catalog.Lease) (catalog.Lease, error) {
	lc := p.lc
	if lc == nil {
		return l, nil
	}
	cc := p.cfg.Catalog
	ttl := p.cfg.Publisher.LeaseTTL
	l, err := p.cat.RunPurges(ctx, l, ttl, lc.store, lc.writer)
	if errors.Is(err, catalog.ErrLeaseLost) {
		return l, err
	} else if err != nil && ctx.Err() == nil {
		p.log.Warn("running purges", "err", err)
	}
	if time.Since(lc.compactedAt) >= cc.CompactInterval {
		start := time.Now()
		if lc.passHook != nil {
			lc.passHook()
		}
		st, l2, err := p.cat.Compact(ctx, l, ttl, lc.store, catalog.CompactPolicy{MinPacks: cc.CompactMinPacks, SmallBytes: cc.CompactSmallBytes, MaxBytes: cc.CompactMaxBytes}, lc.writer)
		l = l2
		// The interval runs from the pass's end: a pass longer than it
		// leaves the publishes an interval before the next (Run).
		lc.compactedAt = time.Now()
		for _, d := range st.Damaged {
			if lc.dlq == nil {
				p.log.Error("compaction found a damaged member file and cannot dead-letter it", "path", d.Path, "table", d.Table, "err", d.Reason)
			} else if derr := deadLetterDamaged(ctx, lc.dlq, d); derr != nil {
				p.log.Error("dead-lettering a damaged member file failed", "path", d.Path, "table", d.Table, "err", derr)
			}
		}
		switch {
		case errors.Is(err, catalog.ErrLeaseLost):
			return l, err
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("compaction failed", "err", err)
			}
		case st.Members > 0:
			lc.compactSeconds.Observe(time.Since(start).Seconds())
			lc.compactions.Inc()
			lc.compactMembers.Add(float64(st.Members))
			lc.compactIn.Add(float64(st.InBytes))
			lc.compactOut.Add(float64(st.OutBytes))
			p.update(func(s *Status) { s.LatestVersion, s.ThroughLSN = st.Snapshot.Version, st.Snapshot.Through })
		}
	}
	if time.Since(lc.collectedAt) >= cc.GCInterval {
		start := time.Now()
		defer func() { lc.collectedAt = time.Now() }() // from the pass's end, as compaction
		st, err := p.cat.CollectGarbage(ctx, lc.store, catalog.GCOptions{})
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("garbage collection failed", "err", err)
			}
		} else {
			lc.gcSeconds.Observe(time.Since(start).Seconds())
			lc.gcMembers.Add(float64(st.Members))
			lc.gcFiles.Add(float64(st.Files))
			lc.gcWatermarks.Add(float64(st.Watermarks))
			lc.gcTemp.Add(float64(st.TempFiles))
		}
		// Claims are independent of the packs' GC: a failed pass of one
		// does not hold the other back.
		if _, err := p.collectClaims(ctx, time.Now()); err != nil && ctx.Err() == nil {
			p.log.Warn("claim collection failed", "err", err)
		}
	}
	return l, nil
}
