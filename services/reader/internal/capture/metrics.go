package capture

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Metrics are the reader's Prometheus metrics.
type Metrics struct {
	Rows           *prometheus.CounterVec // by table
	Bytes          *prometheus.CounterVec // by table
	BatchRows      prometheus.Histogram   //
	BatchBytes     prometheus.Histogram   //
	PublishSeconds prometheus.Histogram   //
	Messages       *prometheus.CounterVec // by kind: data, tick
	ConfirmedLSN   prometheus.Gauge       //
	ServerLSN      prometheus.Gauge       //
	LagBytes       prometheus.Gauge       //
	LagSeconds     prometheus.Gauge       //
	RetainedBytes  prometheus.Gauge       //
	Halted         *prometheus.GaugeVec   // by table, reason
	Restarts       prometheus.Counter     //
	BackfillRows   *prometheus.CounterVec // by table
	Blocked        prometheus.Counter     // waits for an in-flight slot
	FetchWaits     prometheus.Counter     // TOAST reads retried until the change was visible
	Claims         prometheus.Counter     // values carried by reference
	ClaimBytes     prometheus.Counter     // their bytes
	Splits         prometheus.Counter     // batches split because their encoding exceeded nats.max_payload
	ResyncRows     *prometheus.CounterVec // by table: rows a live resync published
	ResyncChunks   *prometheus.CounterVec // by table: chunks published
	ResyncDropped  *prometheus.CounterVec // by table: chunk rows the stream changed inside their window
	ResyncRetries  *prometheus.CounterVec // by table, reason: chunks copied again
	ResyncsRunning *prometheus.GaugeVec   // by table
	Clears         prometheus.Counter     // clears published (TRUNCATE, end of a resync)
	AutoResyncs    *prometheus.CounterVec // resyncs the reader queued by itself, by reason
	SpillBytes     prometheus.Gauge       // streamed transactions' spill files on local disk
	SpillTxns      prometheus.Gauge       // streamed transactions open (not yet committed or aborted)
	StreamedTxns   *prometheus.CounterVec // by event: started, committed, aborted, subxact_aborted
	ReplayWait     prometheus.Histogram   // a standby source: the wait for a resync's low watermark to be replayed
}

// NewMetrics creates and registers the metrics on reg (nil: unregistered;
// a metric already registered there is shared, see telemetry.MustRegister).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Rows:           telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_rows_total", Help: "Rows published to CHANGES, by source table."}, []string{"table"})),
		Bytes:          telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_bytes_total", Help: "Message body bytes published to CHANGES, by source table."}, []string{"table"})),
		BatchRows:      telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_reader_batch_rows", Help: "Rows per published batch.", Buckets: prometheus.ExponentialBuckets(1, 4, 9)})),
		BatchBytes:     telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_reader_batch_bytes", Help: "Body bytes per published batch.", Buckets: prometheus.ExponentialBuckets(256, 4, 9)})),
		PublishSeconds: telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_reader_publish_seconds", Help: "Publish latency until the JetStream ack.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})),
		Messages:       telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_messages_total", Help: "Messages published to CHANGES, by kind (data, tick)."}, []string{"kind"})),
		ConfirmedLSN:   telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_reader_confirmed_lsn", Help: "The LSN confirmed to Postgres (prefix-complete)."})),
		ServerLSN:      telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_reader_server_lsn", Help: "The server's WAL end last reported on the replication stream."})),
		LagBytes:       telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_reader_lag_bytes", Help: "Server WAL end minus the confirmed LSN."})),
		LagSeconds:     telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_reader_lag_seconds", Help: "Age of the oldest commit not yet confirmed (0 when caught up)."})),
		RetainedBytes:  telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_reader_slot_retained_wal_bytes", Help: "WAL the slot retains: pg_current_wal_lsn() - restart_lsn."})),
		Halted:         telemetry.MustRegister(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_reader_table_halted", Help: "1 for a source table whose changes are no longer published, by reason."}, []string{"table", "reason"})),
		Restarts:       telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_reader_session_restarts_total", Help: "Replication sessions ended by an error and restarted from the confirmed LSN."})),
		BackfillRows:   telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_backfill_rows_total", Help: "Rows copied by the backfill, by table."}, []string{"table"})),
		Blocked:        telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_reader_inflight_full_total", Help: "Times the publish pipeline was full (reader.max_in_flight) for a status interval."})),
		FetchWaits:     telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_reader_toast_fetch_waits_total", Help: "Source reads of a moved row's unchanged TOAST values retried because the change's transaction was not yet visible to other sessions."})),
		Claims:         telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_reader_claims_total", Help: "Values over reader.max_inline_value carried by reference through the pack store."})),
		ClaimBytes:     telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_reader_claim_bytes_total", Help: "Bytes of the values carried by reference."})),
		ResyncRows:     telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_resync_rows_total", Help: "Rows a live resync re-copied and published, by table."}, []string{"table"})),
		ResyncChunks:   telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_resync_chunks_total", Help: "Live resync chunks published, by table."}, []string{"table"})),
		ResyncDropped:  telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_resync_rows_dropped_total", Help: "Rows of a resync chunk left out because the stream changed their key inside the chunk's window, by table."}, []string{"table"})),
		ResyncRetries:  telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_resync_chunk_retries_total", Help: "Resync chunks copied again, by table and reason (lost, unsafe)."}, []string{"table", "reason"})),
		ResyncsRunning: telemetry.MustRegister(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_reader_resyncs_running", Help: "1 while a live resync of the table runs."}, []string{"table"})),
		Splits:         telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_reader_batch_splits_total", Help: "Batches split in two because their encoding exceeded nats.max_payload."})),
		AutoResyncs:    telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_auto_resyncs_total", Help: "Resyncs the reader queued by itself: a schema change that rewrote rows without WAL (column_default, column_renamed, column_readded) or a lost slot (slot_lost)."}, []string{"reason"})),
		SpillBytes:     telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_reader_spill_bytes", Help: "Bytes of in-progress transactions streamed by Postgres (protocol 2) held in spill files on local disk until their commit."})),
		SpillTxns:      telemetry.MustRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_reader_streaming_transactions", Help: "In-progress transactions streamed by Postgres (protocol 2) not yet committed or aborted."})),
		StreamedTxns:   telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reader_streamed_transactions_total", Help: "Streamed in-progress transactions (protocol 2), by event: started, committed, aborted, subxact_aborted (a subtransaction's changes left out)."}, []string{"event"})),
		Clears:         telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_reader_clears_total", Help: "Clears published to CHANGES: one per table a TRUNCATE named, one per finished resync."})),
		ReplayWait:     telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_reader_standby_replay_wait_seconds", Help: "Decoding from a standby: the wait, before a resync chunk's read, until the standby replayed the chunk's low watermark written on the primary.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})),
	}
	return m
}
