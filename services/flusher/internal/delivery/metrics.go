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

// newMetrics registers through telemetry.MustRegister: a collector already
// registered (a manager restarted on the same registry) is the one samples
// land on.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		bufferedRows:    telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_buffered_rows", Help: "Rows buffered (live and in flight) across destinations."})),
		bufferedBytes:   telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_buffered_bytes", Help: "Bytes buffered (live and in flight) across destinations."})),
		destinations:    telemetry.MustRegister(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_flusher_destinations", Help: "Destinations by state."}, []string{"state"})),
		oldestBuffer:    telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_oldest_buffer_age_seconds", Help: "Age of the oldest live buffer."})),
		ownedPartitions: telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_owned_partitions", Help: "ROUTED partitions this replica owns."})),
		triggers:        telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_flusher_flush_triggers_total", Help: "Flushes scheduled, by trigger."}, []string{"trigger"})),
		flushes:         telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_flusher_flushes_total", Help: "Flushes finished, by result."}, []string{"result"})),
		flushDuration:   telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_flush_duration_seconds", Help: "Duration of successful flushes.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})),
		packBytes:       telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_pack_bytes", Help: "Size of written files (segments).", Buckets: prometheus.ExponentialBuckets(512, 4, 12)})),
		packRows:        telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_pack_rows", Help: "Rows in written files (segments), every destination's.", Buckets: prometheus.ExponentialBuckets(1, 4, 12)})),
		flushedRows:     telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_flushed_rows_total", Help: "Input rows flushed."})),
		fetchPaused:     telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_fetch_paused_total", Help: "Times a partition stopped fetching for backpressure."})),
		deadLetters:     telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_dead_letters_total", Help: "Messages dead-lettered."})),
		clearSlices:     telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_clear_slices_total", Help: "Clear rows buffered for the destinations of a table-wide clear (one per destination of the partition)."})),
		redelivered:     telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_redelivered_total", Help: "Redelivered messages buffered again."})),
		discarded:       telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_stale_reads_discarded_total", Help: "Fetched messages discarded (nak'd) because their destination failed meanwhile (epoch check) or they arrived past the partition's local lease deadline."})),
		inProgress:      telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_in_progress_acks_total", Help: "In-progress acks sent for buffered messages."})),
		cursorLag:       telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_flusher_cursor_lag_messages", Help: "Messages received but not yet covered by a cursor."})),
		groupSize:       telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_group_commit_flushes", Help: "Flushes committed together by one group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)})),
		filesWritten:    telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_files_written_total", Help: "Files (segments) written to the pack store: one per table and schema per group commit, one per destination and table on the one-at-a-time path."})),
		segmentDests:    telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_flusher_segment_destinations", Help: "Destinations held by one written segment.", Buckets: prometheus.ExponentialBuckets(1, 4, 9)})),
	}
	return m
}
