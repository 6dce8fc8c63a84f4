package route

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Outcomes of sluice_router_batches_total.
const (
	OutcomeRouted    = "routed"    // outputs stored, input acked
	OutcomeTick      = "tick"      // an idle tick, acked with no output
	OutcomePermanent = "permanent" // refused: dead-lettered whole by the consume loop
	OutcomeFailed    = "failed"    // transient failure: naked, will be retried
)

type metrics struct {
	batches       *prometheus.CounterVec
	rows          prometheus.Counter
	dests         prometheus.Histogram
	msgsPerBatch  prometheus.Histogram
	mutations     prometheus.Counter
	moveOuts      prometheus.Counter
	deadRows      prometheus.Counter
	deadLetters   prometheus.Counter
	dropped       prometheus.Counter
	published     prometheus.Counter
	retired       prometheus.Counter
	splitSeconds  prometheus.Histogram
	encodeSeconds prometheus.Histogram
	batchSeconds  prometheus.Histogram
}

// newMetrics registers through telemetry.MustRegister: a collector already
// registered (a router restarted on the same registry) is the one samples
// land on.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		batches: telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_router_batches_total",
			Help: "CHANGES messages handled by the router, by outcome (routed, tick, permanent, failed).",
		}, []string{"outcome"})),
		rows: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_rows_total",
			Help: "Rows routed (every input row of a routed batch: delivered, dead-lettered or dropped).",
		})),
		dests: telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_router_destinations_per_batch",
			Help:    "Destinations one input batch was split into.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		})),
		msgsPerBatch: telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_router_messages_per_batch",
			Help:    "ROUTED messages one routed input batch became (one per partition it touched, more when a payload split cut one): bounded by delivery.partitions, not by destinations.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		})),
		mutations: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_routing_mutations_total",
			Help: "Rows that moved between destinations (OpMoveOut rows whose new row routes elsewhere).",
		})),
		moveOuts: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_move_outs_total",
			Help: "OpMoveOut rows (routing-value or primary-key changes), each routed to its old destination.",
		})),
		deadRows: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_dead_letter_rows_total",
			Help: "Unroutable rows sent to the dead-letter stream.",
		})),
		deadLetters: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_dead_letters_total",
			Help: "Dead-letter messages of unroutable rows (one per input batch that had any).",
		})),
		dropped: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_dropped_rows_total",
			Help: "Rows of unlisted routing values dropped (destinations.unlisted: drop).",
		})),
		published: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_messages_published_total",
			Help: "ROUTED messages published and acknowledged (duplicates included).",
		})),
		retired: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_router_retired_rows_total",
			Help: "Rows dropped because their destination is retired (sluice destinations retire).",
		})),
		splitSeconds: telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_router_split_duration_seconds",
			Help:    "Time to split one input batch into per-destination batches.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 3, 12),
		})),
		encodeSeconds: telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_router_encode_duration_seconds",
			Help:    "Time to encode every partition's message of one input batch (IPC, in parallel across partitions).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 3, 12),
		})),
		batchSeconds: telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_router_batch_duration_seconds",
			Help:    "Time to route one input batch: decode, split, encode, publish and wait for every PubAck.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12),
		})),
	}
	return m
}
