// Package chdbhttp serves the embedded chDB engine over enough of
// ClickHouse's HTTP interface for clickhouse-go/v2 (HTTP protocol) and curl
// to use it: the query in the `query` URL parameter and/or the POST body,
// `database`, `default_format` (Native by default for clickhouse-go, with
// the block framing its `client_protocol_version` asks for), query settings
// as URL parameters, LZ4/ZSTD response compression (`compress=1`), GET /ping,
// and ClickHouse-style errors (status code, X-ClickHouse-Exception-Code,
// "Code: N. DB::Exception: ..." body).
//
// It lets one engine be shared by several processes (`sluice catalog serve`)
// and lets the clickhouse-go backend run in CI against the real engine.
//
// A GET or HEAD runs with readonly = 1, as ClickHouse's HTTP interface
// does (readonly.go says how, and why the statement is first rendered by the
// engine); writes come by POST. With credentials every request needs them;
// without, only loopback is served, to a loopback Host (CheckListen,
// httpx.HostGuard).
//
// It owns no data and must never hold the engine beyond a request; it does
// not implement INSERT with binary data in the body, external tables, query
// parameters (param_*) or sessions: those get a NOT_IMPLEMENTED (48) error
// naming what is missing, never a wrong answer.
package chdbhttp
