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

func newConsumeMetrics(reg prometheus.Registerer) *consumeMetrics {
	m := &consumeMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_consume_messages_total",
			Help: "Messages handled by a consume loop, by stage and outcome (ack, manual, nak, dlq, term).",
		}, []string{"stage", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_consume_handler_duration_seconds",
			Help:    "Time a consume loop's handler took per message.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"stage"}),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_consume_fetch_errors_total",
			Help: "Failed fetches of a consume loop, by stage.",
		}, []string{"stage"}),
	}
	if reg == nil {
		return m
	}
	// Several consume loops share one registry: each gets the registered
	// collectors.
	m.messages = telemetry.MustRegister(reg, m.messages)
	m.duration = telemetry.MustRegister(reg, m.duration)
	m.fetchErrors = telemetry.MustRegister(reg, m.fetchErrors)
	return m
}
