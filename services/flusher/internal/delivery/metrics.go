package delivery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/telemetry"
)

type metrics struct {
	bufferedRows, bufferedBytes prometheus.Gauge
	destinations                *prometheus.GaugeVec
	oldestBuffer                prometheus.Gauge
	ownedPartitions             prometheus.Gauge
	triggers                    *prometheus.CounterVec
	flushes                     *prometheus.CounterVec
	flushDuration               prometheus.Histogram
	packBytes, packRows         prometheus.Histogram
	flushedRows                 prometheus.Counter
	fetchPaused                 prometheus.Counter
	deadLetters                 prometheus.Counter
	clearSlices                 prometheus.Counter
	redelivered                 prometheus.Counter
	discarded                   prometheus.Counter
	inProgress                  prometheus.Counter
	cursorLag                   prometheus.Gauge
	groupSize                   prometheus.Histogram
	filesWritten                prometheus.Counter
	segmentDests                prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		bufferedRows:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_buffered_rows", Help: "Rows buffered (live and in flight) across destinations."}),
		bufferedBytes:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_buffered_bytes", Help: "Bytes buffered (live and in flight) across destinations."}),
		destinations:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_flusher_destinations", Help: "Destinations by state."}, []string{"state"}),
		oldestBuffer:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_oldest_buffer_age_seconds", Help: "Age of the oldest live buffer."}),
		ownedPartitions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_owned_partitions", Help: "ROUTED partitions this replica owns."}),
		triggers:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_flusher_flush_triggers_total", Help: "Flushes scheduled, by trigger."}, []string{"trigger"}),
		flushes:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_flusher_flushes_total", Help: "Flushes finished, by result."}, []string{"result"}),
		flushDuration:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_flush_duration_seconds", Help: "Duration of successful flushes.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		packBytes:       prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_pack_bytes", Help: "Size of written files (segments).", Buckets: prometheus.ExponentialBuckets(512, 4, 12)}),
		packRows:        prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_pack_rows", Help: "Rows in written files (segments), every destination's.", Buckets: prometheus.ExponentialBuckets(1, 4, 12)}),
		flushedRows:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_flushed_rows_total", Help: "Input rows flushed."}),
		fetchPaused:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_fetch_paused_total", Help: "Times a partition stopped fetching for backpressure."}),
		deadLetters:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_dead_letters_total", Help: "Messages dead-lettered."}),
		clearSlices:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_clear_slices_total", Help: "Clear rows buffered for the destinations of a table-wide clear (one per destination of the partition)."}),
		redelivered:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_redelivered_total", Help: "Redelivered messages buffered again."}),
		discarded:       prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_stale_reads_discarded_total", Help: "Fetched messages discarded (nak'd) because their destination failed meanwhile (epoch check) or they arrived past the partition's local lease deadline."}),
		inProgress:      prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_in_progress_acks_total", Help: "In-progress acks sent for buffered messages."}),
		cursorLag:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_cursor_lag_messages", Help: "Messages received but not yet covered by a cursor."}),
		groupSize:       prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_group_commit_flushes", Help: "Flushes committed together by one group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		filesWritten:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_files_written_total", Help: "Files (segments) written to the pack store: one per table and schema per group commit, one per destination and table on the one-at-a-time path."}),
		segmentDests:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_segment_destinations", Help: "Destinations held by one written segment.", Buckets: prometheus.ExponentialBuckets(1, 4, 9)}),
	}
	// telemetry.MustRegister: a collector already registered (a manager
	// restarted on the same registry) is the one samples land on.
	m.bufferedRows = telemetry.MustRegister(reg, m.bufferedRows)
	m.bufferedBytes = telemetry.MustRegister(reg, m.bufferedBytes)
	m.destinations = telemetry.MustRegister(reg, m.destinations)
	m.oldestBuffer = telemetry.MustRegister(reg, m.oldestBuffer)
	m.ownedPartitions = telemetry.MustRegister(reg, m.ownedPartitions)
	m.triggers = telemetry.MustRegister(reg, m.triggers)
	m.flushes = telemetry.MustRegister(reg, m.flushes)
	m.flushDuration = telemetry.MustRegister(reg, m.flushDuration)
	m.packBytes = telemetry.MustRegister(reg, m.packBytes)
	m.packRows = telemetry.MustRegister(reg, m.packRows)
	m.flushedRows = telemetry.MustRegister(reg, m.flushedRows)
	m.fetchPaused = telemetry.MustRegister(reg, m.fetchPaused)
	m.deadLetters = telemetry.MustRegister(reg, m.deadLetters)
	m.clearSlices = telemetry.MustRegister(reg, m.clearSlices)
	m.redelivered = telemetry.MustRegister(reg, m.redelivered)
	m.discarded = telemetry.MustRegister(reg, m.discarded)
	m.inProgress = telemetry.MustRegister(reg, m.inProgress)
	m.cursorLag = telemetry.MustRegister(reg, m.cursorLag)
	m.groupSize = telemetry.MustRegister(reg, m.groupSize)
	m.filesWritten = telemetry.MustRegister(reg, m.filesWritten)
	m.segmentDests = telemetry.MustRegister(reg, m.segmentDests)
	return m
}
