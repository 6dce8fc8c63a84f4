package chdbhttp

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	chcompress "github.com/ClickHouse/ch-go/compress"
	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// ClickHouse error codes the handler produces itself.
const (
	codeNotImplemented       = 48
	codeUnknownSetting       = 115
	codeAuthenticationFailed = 516
	codeTooLarge             = 62 // SYNTAX_ERROR is what a server says for an unparseable body
	codeReadonly             = 164
)

// Options configure the handler.
type Options struct {
	// User and Password, when User is set, are required on every request
	// (basic auth, X-ClickHouse-User/Key headers or user/password params).
	User, Password string
	// MaxQueryBytes bounds the query text (URL + body); default 16 MiB.
	MaxQueryBytes int64
	Log           *slog.Logger
	// InsecureNoAuth serves without credentials, on a loopback address
	// only (CheckListen) and still with the Host check; any local user
	// and process can then read and write the catalog.
	InsecureNoAuth bool
	// AuthHint ends the answer to a request with wrong or missing
	// credentials: where a client finds them (the file catalog serve
	// generated them into). It names a path, never the secret.
	AuthHint string
}

// Handler is the HTTP interface over one chDB engine.
type Handler struct {
	eng   *chdb.Conn
	opts  Options
	entry http.Handler // the Host guard (no credentials) or serveHTTP
}

// New returns a handler serving eng. It refuses every request a web page
// could send (httpx.NoBrowser: an Origin or Sec-Fetch-Site header, or a
// form-shaped POST without an X-ClickHouse-* header), with or without
// credentials, since a browser may add cached Basic credentials to a
// cross-site request. Without credentials it answers only requests that
// reached a loopback address and name it by a loopback Host
// (httpx.HostGuard), so a web page cannot reach it by DNS rebinding.
func New(eng *chdb.Conn, opts Options) *Handler {
	if opts.MaxQueryBytes <= 0 {
		opts.MaxQueryBytes = 16 << 20
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Password != "" && opts.User == "" {
		opts.User = "default" // what ClickHouse clients send without a user
	}
	h := &Handler{eng: eng, opts: opts}
	h.entry = http.HandlerFunc(h.serveHTTP)
	if opts.User == "" {
		h.entry = httpx.HostGuard(h.entry)
	}
	h.entry = httpx.NoBrowser(h.entry, "X-ClickHouse-", "send the credentials as X-ClickHouse-User and X-ClickHouse-Key headers (as clickhouse-go does)")
	return h
}

// ErrInsecureOffLoopback is returned when InsecureNoAuth is asked for on
// an address other hosts can reach.
var ErrInsecureOffLoopback = errors.New("refusing to serve the catalog without credentials on a non-loopback address")

// CheckListen is the start-up half of the catalog's access rule: it serves
// with credentials (catalog.user and catalog.password, which its clients
// send), or without them only when insecure is asked for and addr is a
// loopback address; then it logs a warning.
func CheckListen(addr net.Addr, opts Options) error {
	switch {
	case opts.User != "" || opts.Password != "":
		return nil
	case !opts.InsecureNoAuth:
		return fmt.Errorf("%w: the catalog on %s needs credentials: set SLUICE_CATALOG_PASSWORD (and SLUICE_CATALOG_USER; its clients send the same), or let catalog serve generate them", httpx.ErrNoAuth, addr)
	case !httpx.IsLoopback(addr):
		return fmt.Errorf("%w: %s is reachable from other hosts; --insecure-no-auth serves only a loopback address (127.0.0.1:PORT): set SLUICE_CATALOG_PASSWORD instead", ErrInsecureOffLoopback, addr)
	}
	if opts.Log != nil {
		opts.Log.Warn("serving the catalog without credentials (--insecure-no-auth): every local user and process can read and write it", "addr", addr.String())
	}
	return nil
}

// Parameters of the HTTP interface that are not query settings.
var protocolParams = map[string]bool{
	"query": true, "database": true, "default_format": true, "client_protocol_version": true,
	"query_id": true, "quota_key": true, "compress": true, "decompress": true,
	"user": true, "password": true, "session_id": true, "session_timeout": true, "session_check": true,
	"wait_end_of_query": true, "buffer_size": true, "send_progress_in_http_headers": true,
	"http_headers_progress_interval_ms": true, "enable_http_compression": true,
	"http_zlib_compression_level": true, "network_compression_method": true,
	"network_zstd_compression_level": true, "http_native_compression_disable_checksumming_on_decompress": true,
}

var (
	formatClause = regexp.MustCompile(`(?is)\bFORMAT\s+([A-Za-z0-9_]+)\s*;?\s*$`)
	settingName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// httpError is an error answered as a ClickHouse exception.
type httpError struct {
	status int
	code   int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func newErr(status, code int, format string, args ...any) *httpError {
	return &httpError{status: status, code: code, msg: fmt.Sprintf("Code: %d. DB::Exception: %s", code, fmt.Sprintf(format, args...))}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.entry.ServeHTTP(w, r) }

func (h *Handler) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ping", "/replicas_status":
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = io.WriteString(w, "Ok.\n")
		return
	case "/", "":
	default:
		writeErr(w, newErr(http.StatusNotFound, 0, "There is no handle %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost && r.Method != http.MethodHead {
		writeErr(w, newErr(http.StatusMethodNotAllowed, 0, "method %s not allowed", r.Method))
		return
	}
	if err := h.serve(w, r); err != nil {
		var he *httpError
		if !errors.As(err, &he) {
			he = fromEngine(err)
		}
		h.opts.Log.Debug("chdbhttp: query failed", slog.Int("code", he.code), slog.String("error", he.msg))
		writeErr(w, he)
	}
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) error {
	params := r.URL.Query()
	if err := h.authenticate(r, params); err != nil {
		return err
	}
	query, err := h.readQuery(r, params)
	if err != nil {
		return err
	}
	if strings.TrimSpace(query) == "" {
		return newErr(http.StatusBadRequest, 62, "Empty query")
	}

	eng := h.eng
	db := params.Get("database")
	if db == "" {
		db = r.Header.Get("X-ClickHouse-Database")
	}
	if db != "" {
		eng = eng.Database(db)
	}
	readonly := r.Method == http.MethodGet || r.Method == http.MethodHead
	if readonly {
		if query, err = readOnlyStatement(r, eng, query); err != nil {
			return err
		}
	}

	// Settings: every parameter that is not part of the protocol.
	var settings []string
	for k := range params {
		switch {
		case protocolParams[k]:
			continue
		case readonly && k == "readonly":
			return newErr(http.StatusBadRequest, codeReadonly, "a GET query runs with readonly = 1; send it with POST to change readonly")
		case strings.HasPrefix(k, "param_"):
			return newErr(http.StatusBadRequest, codeNotImplemented, "query parameters (%s) are not supported by chdbhttp; bind values in the SQL", k)
		case strings.HasSuffix(k, "_format") || strings.HasSuffix(k, "_structure") || strings.HasSuffix(k, "_types"):
			return newErr(http.StatusBadRequest, codeNotImplemented, "external tables (%s) are not supported by chdbhttp", k)
		case !settingName.MatchString(k):
			return newErr(http.StatusBadRequest, codeUnknownSetting, "Unknown setting %q", k)
		}
		settings = append(settings, k+" = "+quoteSetting(params.Get(k)))
	}
	sort.Strings(settings)
	if readonly {
		// Last, so no setting before it in the list can change it.
		settings = append(settings, "readonly = 1")
	}

	format := params.Get("default_format")
	if format == "" {
		format = "TabSeparated"
	}
	ownFormat := false
	if m := formatClause.FindStringSubmatch(query); m != nil && !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(query)), "INSERT") {
		format, ownFormat = m[1], true
	}
	if len(settings) > 0 && (readonly || (chdb.IsSelect(query) && !ownFormat)) {
		// Per-query settings ride on the statement; a SET would change the
		// shared session for everybody. (A GET's statement is the engine's
		// own rendering of one statement, so they end it whatever it is.)
		query = strings.TrimRight(strings.TrimSpace(query), ";") + "\nSETTINGS " + strings.Join(settings, ", ")
	}

	start := time.Now()
	out, err := eng.QueryRaw(r.Context(), query, format)
	if err != nil {
		return err
	}

	revision, _ := strconv.ParseUint(params.Get("client_protocol_version"), 10, 64)
	compress := params.Get("compress") == "1"
	if format == "Native" {
		if len(out) == 0 && chdb.IsSelect(query) {
			// A server names the columns of an empty result; so do we.
			if out, err = h.emptyHeader(r, eng, query); err != nil {
				return err
			}
		}
		if revision > 0 || compress {
			method := chcompress.LZ4
			if strings.EqualFold(params.Get("network_compression_method"), "ZSTD") {
				method = chcompress.ZSTD
			}
			if out, err = reframe(out, revision, compress, method); err != nil {
				return newErr(http.StatusInternalServerError, 0, "re-encoding Native output: %v", err)
			}
		}
	} else if compress {
		if out, err = compressAll(out, chcompress.LZ4); err != nil {
			return newErr(http.StatusInternalServerError, 0, "compressing output: %v", err)
		}
	}

	hdr := w.Header()
	if format == "Native" || compress {
		hdr.Set("Content-Type", "application/octet-stream")
	} else {
		hdr.Set("Content-Type", "text/plain; charset=UTF-8")
	}
	qid := params.Get("query_id")
	if qid == "" {
		qid = uuid.NewString()
	}
	hdr.Set("X-ClickHouse-Query-Id", qid)
	hdr.Set("X-ClickHouse-Format", format)
	hdr.Set("X-ClickHouse-Timezone", "UTC")
	hdr.Set("X-ClickHouse-Server-Display-Name", "chdbhttp")
	hdr.Set("X-ClickHouse-Summary", fmt.Sprintf(`{"read_rows":"0","read_bytes":"0","written_rows":"0","written_bytes":"0","total_rows_to_read":"0","result_rows":"0","result_bytes":"%d","elapsed_ns":"%d"}`, len(out), time.Since(start).Nanoseconds()))
	hdr.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(out)
	}
	return nil
}

func (h *Handler) authenticate(r *http.Request, params map[string][]string) error {
	if h.opts.User == "" {
		return nil
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		user, pass = r.Header.Get("X-ClickHouse-User"), r.Header.Get("X-ClickHouse-Key")
	}
	if user == "" {
		if v := params["user"]; len(v) > 0 {
			user = v[0]
		}
		if v := params["password"]; len(v) > 0 {
			pass = v[0]
		}
	}
	if subtle.ConstantTimeCompare([]byte(user), []byte(h.opts.User)) != 1 ||
		subtle.ConstantTimeCompare([]byte(pass), []byte(h.opts.Password)) != 1 {
		hint := ""
		if h.opts.AuthHint != "" {
			hint = " (" + h.opts.AuthHint + ")"
		}
		return newErr(http.StatusUnauthorized, codeAuthenticationFailed, "%s: Authentication failed: password is incorrect, or there is no user with such name.%s", user, hint)
	}
	return nil
}

func (h *Handler) readQuery(r *http.Request, params map[string][]string) (string, error) {
	var q string
	if v := params["query"]; len(v) > 0 {
		q = v[0]
	}
	if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return q, nil
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
		return "", newErr(http.StatusBadRequest, codeNotImplemented, "external tables (multipart requests) are not supported by chdbhttp")
	}
	if v := params["decompress"]; len(v) > 0 && v[0] == "1" {
		return "", newErr(http.StatusBadRequest, codeNotImplemented, "compressed request bodies (decompress=1) are not supported by chdbhttp")
	}
	var body io.Reader = http.MaxBytesReader(nil, r.Body, h.opts.MaxQueryBytes)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return "", newErr(http.StatusBadRequest, 0, "reading gzip body: %v", err)
		}
		defer zr.Close()
		body = io.LimitReader(zr, h.opts.MaxQueryBytes+1)
	}
	b, err := io.ReadAll(body)
	if err != nil || int64(len(b)) > h.opts.MaxQueryBytes {
		return "", newErr(http.StatusRequestEntityTooLarge, codeTooLarge, "query is larger than %d bytes", h.opts.MaxQueryBytes)
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return "", newErr(http.StatusBadRequest, codeNotImplemented, "binary data in the request body (e.g. INSERT ... FORMAT Native) is not supported by chdbhttp; use INSERT ... SELECT or a text format")
	}
	if len(b) == 0 {
		return q, nil
	}
	if q != "" {
		return q + "\n" + string(b), nil
	}
	return string(b), nil
}

// emptyHeader encodes a zero-row Native block (revision 0) naming the
// result's columns.
func (h *Handler) emptyHeader(r *http.Request, eng *chdb.Conn, query string) ([]byte, error) {
	names, types, err := eng.Header(r.Context(), query)
	if err != nil || len(names) == 0 {
		return nil, nil //nolint:nilerr // best effort: an empty body is what chDB gave
	}
	var buf chproto.Buffer
	buf.PutUVarInt(uint64(len(names)))
	buf.PutUVarInt(0)
	for i := range names {
		buf.PutString(names[i])
		buf.PutString(types[i])
	}
	return buf.Buf, nil
}

// reframe rewrites chDB's Native output (written without a client revision)
// block by block for a client that asked for client_protocol_version
// revision — block info and per-column serialization flags, as a server
// writes them — and optionally compresses each block. Column data is copied
// byte for byte: clickhouse-go's codecs only measure it.
func reframe(native []byte, revision uint64, compress bool, method chcompress.Method) ([]byte, error) {
	br := bytes.NewReader(native)
	// ch-go's Reader buffers; handing it a big enough *bufio.Reader makes it
	// use ours, so the read position is known exactly.
	bufr := bufio.NewReaderSize(br, 1<<20)
	r := chproto.NewReader(bufr)
	pos := func() int { return len(native) - br.Len() - bufr.Buffered() }
	sc := &column.ServerContext{Timezone: time.UTC}
	var out, blk chproto.Buffer
	cw := chcompress.NewWriter(chcompress.LevelZero, method)
	for pos() < len(native) {
		blk.Reset()
		if revision > 0 {
			// BlockInfo: field 1 is_overflows=false, field 2 bucket_num=-1, end.
			blk.PutUVarInt(1)
			blk.PutBool(false)
			blk.PutUVarInt(2)
			blk.PutInt32(-1)
			blk.PutUVarInt(0)
		}
		start := pos()
		numCols, err := r.UVarInt()
		if err != nil {
			return nil, fmt.Errorf("reading block header: %w", err)
		}
		numRows, err := r.UVarInt()
		if err != nil {
			return nil, fmt.Errorf("reading block header: %w", err)
		}
		blk.Buf = append(blk.Buf, native[start:pos()]...)
		for i := uint64(0); i < numCols; i++ {
			start = pos()
			name, err := r.Str()
			if err != nil {
				return nil, fmt.Errorf("reading column %d name: %w", i, err)
			}
			typ, err := r.Str()
			if err != nil {
				return nil, fmt.Errorf("reading column %s type: %w", name, err)
			}
			blk.Buf = append(blk.Buf, native[start:pos()]...)
			if revision >= proto.DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION {
				blk.PutBool(false) // no custom serialization
			}
			if numRows == 0 {
				continue
			}
			start = pos()
			c, err := column.Type(typ).Column(name, sc)
			if err != nil {
				return nil, fmt.Errorf("column %s %s: %w", name, typ, err)
			}
			if cs, ok := c.(column.CustomSerialization); ok {
				if err := cs.ReadStatePrefix(r); err != nil {
					return nil, fmt.Errorf("column %s %s: %w", name, typ, err)
				}
			}
			if err := c.Decode(r, int(numRows)); err != nil {
				return nil, fmt.Errorf("column %s %s: %w", name, typ, err)
			}
			blk.Buf = append(blk.Buf, native[start:pos()]...)
		}
		if !compress {
			out.Buf = append(out.Buf, blk.Buf...)
			continue
		}
		if err := cw.Compress(blk.Buf); err != nil {
			return nil, err
		}
		out.Buf = append(out.Buf, cw.Data...)
	}
	return out.Buf, nil
}

// compressAll compresses data as ClickHouse compressed blocks.
func compressAll(data []byte, method chcompress.Method) ([]byte, error) {
	const maxBlock = 1 << 20
	cw := chcompress.NewWriter(chcompress.LevelZero, method)
	var out []byte
	for len(data) > 0 {
		n := min(len(data), maxBlock)
		if err := cw.Compress(data[:n]); err != nil {
			return nil, err
		}
		out = append(out, cw.Data...)
		data = data[n:]
	}
	return out, nil
}

// quoteSetting renders a URL parameter as a SETTINGS value: numbers as they
// are, everything else as a quoted string.
func quoteSetting(v string) string {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// fromEngine maps an engine error to a ClickHouse-like HTTP error.
func fromEngine(err error) *httpError {
	var ex *chdb.Exception
	if errors.As(err, &ex) {
		msg := ex.Message
		if !strings.HasPrefix(msg, "Code:") {
			msg = fmt.Sprintf("Code: %d. DB::Exception: %s", ex.Code, msg)
		}
		return &httpError{status: statusOf(ex.Code), code: ex.Code, msg: msg}
	}
	if errors.Is(err, chdb.ErrClosed) {
		return &httpError{status: http.StatusServiceUnavailable, code: 0, msg: "Code: 0. DB::Exception: " + err.Error()}
	}
	return &httpError{status: http.StatusInternalServerError, code: 0, msg: "Code: 0. DB::Exception: " + err.Error()}
}

// statusOf maps a ClickHouse error code to the status a server would send.
func statusOf(code int) int {
	switch code {
	case 60, 81: // UNKNOWN_TABLE, UNKNOWN_DATABASE
		return http.StatusNotFound
	case 62, 47, 46, 43, 53: // SYNTAX_ERROR, UNKNOWN_IDENTIFIER, UNKNOWN_FUNCTION, ILLEGAL_TYPE_OF_ARGUMENT, TYPE_MISMATCH
		return http.StatusBadRequest
	case 516, 192, 193, 194: // authentication
		return http.StatusUnauthorized
	case 497: // ACCESS_DENIED
		return http.StatusForbidden
	case 159, 209, 210: // TIMEOUT_EXCEEDED, SOCKET_TIMEOUT, NETWORK_ERROR
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func writeErr(w http.ResponseWriter, e *httpError) {
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.Header().Set("X-ClickHouse-Exception-Code", strconv.Itoa(e.code))
	w.WriteHeader(e.status)
	_, _ = io.WriteString(w, e.msg+"\n")
}
