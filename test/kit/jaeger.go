package kit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Jaeger is a Jaeger v2 all-in-one process with in-memory storage, its OTLP
// gRPC receiver and query API on free loopback ports.
type Jaeger struct {
	P    *Proc
	OTLP string // host:port of the OTLP gRPC receiver (telemetry.otlp_endpoint)
	API  string // http://host:port of the query API
}

// StartJaeger starts Jaeger from the cached binary; ok is false when the
// binary is absent (deploy/fetch-jaeger.sh builds it).
func StartJaeger(ctx context.Context, dir string) (j *Jaeger, ok bool, err error) {
	bin := JaegerBin()
	if bin == "" {
		return nil, false, nil
	}
	var ports [5]int
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, true, err
		}
	}
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, ports[0], ports[1], ports[2], ports[3], ports[4])
	path := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, true, err
	}
	j = &Jaeger{
		P:    &Proc{Name: "jaeger", Bin: bin, Args: []string{"--config", path}, Dir: dir, Ready: fmt.Sprintf("http://127.0.0.1:%d/api/services", ports[1])},
		OTLP: fmt.Sprintf("127.0.0.1:%d", ports[3]),
		API:  fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
	}
	if err := j.P.Start(ctx); err != nil {
		return nil, true, err
	}
	return j, true, nil
}

// JTrace is a trace as Jaeger's query API returns it.
type JTrace struct {
	TraceID   string              `json:"traceID"`
	Spans     []JSpan             `json:"spans"`
	Processes map[string]JProcess `json:"processes"`
}

// JSpan is one span of a JTrace.
type JSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags      []JTag `json:"tags"`
	ProcessID string `json:"processID"`
}

// JTag is a span attribute.
type JTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// JProcess names a span's service.
type JProcess struct {
	ServiceName string `json:"serviceName"`
}

// Tag returns a span's attribute as text.
func (s JSpan) Tag(key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value), true
		}
	}
	return "", false
}

func (j *Jaeger) get(ctx context.Context, path string, q url.Values, out any) error {
	u := j.API + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("jaeger %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Services lists the services Jaeger has spans of.
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	var r struct {
		Data []string `json:"data"`
	}
	err := j.get(ctx, "/api/services", nil, &r)
	return r.Data, err
}

// Traces searches the traces of a service in the last hour.
func (j *Jaeger) Traces(ctx context.Context, service string, limit int) ([]JTrace, error) {
	var r struct {
		Data []JTrace `json:"data"`
	}
	q := url.Values{"service": {service}, "limit": {fmt.Sprint(limit)}, "lookback": {"1h"},
		"start": {fmt.Sprint(time.Now().Add(-time.Hour).UnixMicro())}, "end": {fmt.Sprint(time.Now().Add(time.Minute).UnixMicro())}}
	err := j.get(ctx, "/api/traces", q, &r)
	return r.Data, err
}

// Trace fetches one trace.
func (j *Jaeger) Trace(ctx context.Context, id string) (JTrace, error) {
	var r struct {
		Data []JTrace `json:"data"`
	}
	if err := j.get(ctx, "/api/traces/"+id, nil, &r); err != nil {
		return JTrace{}, err
	}
	if len(r.Data) == 0 {
		return JTrace{}, fmt.Errorf("trace %s not found", id)
	}
	return r.Data[0], nil
}
