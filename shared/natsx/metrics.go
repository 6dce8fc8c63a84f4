package natsx

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Outcomes counted by sluice_consume_messages_total.
const (
	OutcomeAck    = "ack"    // handled, acked by Consume
	OutcomeManual = "manual" // handled, the handler acks itself
	OutcomeNak    = "nak"    // transient failure, redelivered after a backoff
	OutcomeDLQ    = "dlq"    // permanent failure, recorded on the dead-letter stream
	OutcomeTerm   = "term"   // terminated (after dlq, or permanent without a DeadLetter)
)

type consumeMetrics struct {
	messages    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	fetchErrors *prometheus.CounterVec
}

// newConsumeMetrics registers through telemetry.MustRegister: several
// consume loops share one registry, and each gets the registered collectors.
func newConsumeMetrics(reg prometheus.Registerer) *consumeMetrics {
	m := &consumeMetrics{
		messages: telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_consume_messages_total",
			Help: "Messages handled by a consume loop, by stage and outcome (ack, manual, nak, dlq, term).",
		}, []string{"stage", "outcome"})),
		duration: telemetry.MustRegister(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_consume_handler_duration_seconds",
			Help:    "Time a consume loop's handler took per message.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"stage"})),
		fetchErrors: telemetry.MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_consume_fetch_errors_total",
			Help: "Failed fetches of a consume loop, by stage.",
		}, []string{"stage"})),
	}
	return m
}
