// Package jaeger reads traces from Jaeger's query API (/api/traces,
// /api/traces/{id}; Jaeger v1.75's all-in-one serves it beside its UI):
// one trace, the traces joined to it by span links (a flush's upstream
// reader and router traces, its downstream publisher traces), and a
// destination's latest flush. `sluice trace` prints what it reads and the
// API's trace view (/api/v1/traces/{id}) serves it to the web UI. It only
// reads, bounds every answer, and never follows a link outside Jaeger.
package jaeger
