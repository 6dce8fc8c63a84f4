package kit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
)

// Table is one captured table as the oracle sees it.
type Table struct {
	Name    string   // schema.table
	Keys    []string // primary key columns
	Routing string   // routing column
	// Tenants are routing values to check in this table besides
	// CheckOptions.Tenants and those the source holds now.
	Tenants []string
	// Sample, when set, checks only some of the table's tenants: for a
	// table with thousands of tenants, reading every one is too slow.
	Sample *Sample
}

// Sample picks the tenants of a table the oracle reads: every one in
// Always (those that received a change in the last phase: a missed
// change can only be there) plus N others drawn at random, seeded by Seed,
// from the rest (those the source holds, and the table's and
// CheckOptions' Tenants).
type Sample struct {
	Always []string
	N      int
	Seed   uint64
}

// pick returns the tenants of all to read, sorted, and how many it skips.
func (s *Sample) pick(all []string) ([]string, int) {
	if s == nil {
		return all, 0
	}
	always := map[string]bool{}
	for _, t := range s.Always {
		always[t] = true
	}
	var out, rest []string
	for _, t := range all {
		if always[t] {
			out = append(out, t)
		} else {
			rest = append(rest, t)
		}
	}
	r := rand.New(rand.NewPCG(s.Seed, 0x5a3b1e))
	r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	n := min(s.N, len(rest))
	out = append(out, rest[:n]...)
	sort.Strings(out)
	return out, len(rest) - n
}

// CheckOptions configure the oracle.
type CheckOptions struct {
	Tables []Table
	// Tenants are routing values to check besides those the source holds
	// now (every value the workload ever used): a destination whose tenant
	// has no rows left must read empty.
	Tenants []string
	// Snapshot pins every read to one version; 0 pins the latest.
	Snapshot uint64
	// Parallel reads; default 4.
	Parallel int
	// MaxDiffs kept in the report; default 40.
	MaxDiffs int
	// Only, when set, limits the check to the tenants it accepts (a
	// sample: the report counts only their rows and destinations).
	Only func(tenant string) bool
}

// Report is the oracle's verdict.
type Report struct {
	Snapshot     uint64
	ThroughLSN   string
	Destinations int // (destination, table) pairs read
	// Sampled counts the (destination, table) pairs a Sample left unread.
	Sampled    int
	Rows       int // rows read
	SourceRows int
	Missing    int // in the source, not in the destination
	Phantom    int // in the destination, not in the source
	Duplicate  int // a key read twice
	Differ     int // same key, different values
	Leaked     int // a row of another tenant
	ReadErrors int
	ReadTime   time.Duration // summed over reads
	// ByColumn counts value differences per table.column (a missing or
	// phantom row counts under table.(row)).
	ByColumn map[string]int
	// Examples holds the first two differences of each ByColumn category.
	Examples map[string][]string
	Diffs    []string
	Elapsed  time.Duration
}

// Explain lists up to two examples of every category of difference.
func (r Report) Explain() string {
	var cats []string
	for c := range r.Examples {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	var b strings.Builder
	for _, c := range cats {
		fmt.Fprintf(&b, "%s ×%d:\n", c, r.ByColumn[c])
		for _, e := range r.Examples[c] {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	return b.String()
}

// OK reports whether the destinations equal the source.
func (r Report) OK() bool {
	return r.Missing+r.Phantom+r.Duplicate+r.Differ+r.Leaked+r.ReadErrors == 0
}

func (r Report) String() string {
	var cols []string
	for c, n := range r.ByColumn {
		cols = append(cols, fmt.Sprintf("%s×%d", c, n))
	}
	sort.Strings(cols)
	if len(cols) > 30 {
		cols = append(cols[:30], "…")
	}
	by := ""
	if len(cols) > 0 {
		by = "; by column: " + strings.Join(cols, " ")
	}
	sampled := ""
	if r.Sampled > 0 {
		sampled = fmt.Sprintf(" (%d more left unread by sampling)", r.Sampled)
	}
	return fmt.Sprintf("snapshot %d (through %s): %d destination tables%s, %d rows read, %d source rows: %d missing, %d phantom, %d duplicate, %d differ, %d leaked, %d read errors (%s, %s per read)",
		r.Snapshot, r.ThroughLSN, r.Destinations, sampled, r.Rows, r.SourceRows, r.Missing, r.Phantom, r.Duplicate, r.Differ, r.Leaked, r.ReadErrors, r.Elapsed.Round(time.Millisecond), (r.ReadTime/time.Duration(max(r.Destinations, 1))).Round(time.Millisecond)) + by
}

type snapshot struct {
	Version    uint64 `json:"version"`
	ThroughLSN string `json:"through_lsn"`
}

// Latest returns the latest published snapshot's version and through_lsn.
func Latest(ctx context.Context, server string) (uint64, string, error) {
	out, err := CLI(ctx, server, "snapshots", "--json")
	if err != nil {
		return 0, "", err
	}
	var snaps []snapshot
	if err := json.Unmarshal([]byte(out), &snaps); err != nil {
		return 0, "", fmt.Errorf("decoding snapshots: %w: %q", err, out)
	}
	if len(snaps) == 0 {
		return 0, "", fmt.Errorf("no snapshot published")
	}
	s := snaps[len(snaps)-1]
	return s.Version, s.ThroughLSN, nil
}

// Check compares every destination's copy of every table, read with
// `sluice read --format jsonl --snapshot V`, with the source's
// to_jsonb(row) (TimeZone UTC) of that tenant's rows. Rows are matched by
// primary key; values are compared as JSON values (numbers exactly, as
// rationals; timestamps as instants).
func Check(ctx context.Context, dsn, server string, o CheckOptions) (rep Report, err error) {
	start := time.Now()
	if o.Parallel == 0 {
		o.Parallel = 6
	}
	if o.MaxDiffs == 0 {
		o.MaxDiffs = 40
	}
	rep = Report{ByColumn: map[string]int{}, Examples: map[string][]string{}}
	if o.Snapshot == 0 {
		v, through, lerr := Latest(ctx, server)
		if lerr != nil {
			return rep, lerr
		}
		rep.Snapshot, rep.ThroughLSN = v, through
		// Pinned while it is read, as a user reading one snapshot for
		// longer than the retention window must: each tenant's read is a
		// fresh read, and a pipeline with short retention (the soak's
		// aggressive lifecycle settings) expires the snapshot mid-check.
		if _, perr := CLI(ctx, server, "snapshots", "pin", fmt.Sprint(v), "--reason", "oracle check"); perr != nil {
			return rep, fmt.Errorf("pinning snapshot %d for the check: %w", v, perr)
		}
		defer func() {
			if _, uerr := CLI(context.Background(), server, "snapshots", "unpin", fmt.Sprint(v)); uerr != nil && err == nil {
				err = fmt.Errorf("unpinning snapshot %d after the check: %w", v, uerr)
			}
		}()
	} else {
		rep.Snapshot = o.Snapshot
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return rep, fmt.Errorf("connecting to the source: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET TimeZone = 'UTC'"); err != nil {
		return rep, err
	}
	var mu sync.Mutex
	diff := func(kind *int, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		*kind++
		if len(rep.Diffs) < o.MaxDiffs {
			rep.Diffs = append(rep.Diffs, fmt.Sprintf(format, args...))
		}
	}
	for _, t := range o.Tables {
		// The source, grouped by tenant.
		want := map[string]map[string]any{}
		for _, tenant := range append(append([]string(nil), o.Tenants...), t.Tenants...) {
			if o.Only == nil || o.Only(tenant) {
				want[tenant] = map[string]any{}
			}
		}
		rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT %s::text, to_jsonb(sluice_oracle_row)::text FROM %s sluice_oracle_row`, pgx.Identifier{t.Routing}.Sanitize(), t.Name))
		if err != nil {
			return rep, fmt.Errorf("reading %s from the source: %w", t.Name, err)
		}
		for rows.Next() {
			var tenant *string
			var line string
			if err := rows.Scan(&tenant, &line); err != nil {
				rows.Close()
				return rep, err
			}
			if tenant == nil {
				continue // unroutable: dead-lettered, never in a destination
			}
			if o.Only != nil && !o.Only(*tenant) {
				continue
			}
			r, err := decode(line)
			if err != nil {
				rows.Close()
				return rep, err
			}
			if want[*tenant] == nil {
				want[*tenant] = map[string]any{}
			}
			want[*tenant][keyOf(r, t.Keys)] = norm(r)
			rep.SourceRows++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return rep, err
		}
		tenants := make([]string, 0, len(want))
		for k := range want {
			tenants = append(tenants, k)
		}
		sort.Strings(tenants)
		tenants, skipped := t.Sample.pick(tenants)
		rep.Sampled += skipped

		eg, ectx := errgroup.WithContext(ctx)
		eg.SetLimit(o.Parallel)
		for _, tenant := range tenants {
			eg.Go(func() error {
				dest, err := proto.DestinationName(tenant)
				if err != nil {
					return nil // unroutable values never reach a destination
				}
				label := fmt.Sprintf("%s/%s", t.Name, dest)
				readStart := time.Now()
				defer func() {
					mu.Lock()
					rep.ReadTime += time.Since(readStart)
					mu.Unlock()
				}()
				// By the tenant's own value: the server names it as the
				// router does (dest above is only the label and the
				// unroutable check).
				out, err := CLI(ectx, server, "read", "--value", tenant, "--table", t.Name, "--format", "jsonl",
					"--snapshot", fmt.Sprint(rep.Snapshot))
				if err != nil {
					if len(want[tenant]) == 0 && (strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "not found")) {
						return nil // nothing to read, nothing expected
					}
					diff(&rep.ReadErrors, "%s: read failed: %v", label, err)
					return nil
				}
				got := map[string]any{}
				n := 0
				for _, l := range strings.Split(out, "\n") {
					if strings.TrimSpace(l) == "" {
						continue
					}
					n++
					r, err := decode(l)
					if err != nil {
						diff(&rep.ReadErrors, "%s: undecodable row %q: %v", label, l, err)
						continue
					}
					if !routedTo(r[t.Routing], tenant) {
						diff(&rep.Leaked, "%s: row of tenant %v leaked in: %s", label, r[t.Routing], l)
					}
					k := keyOf(r, t.Keys)
					if _, dup := got[k]; dup {
						diff(&rep.Duplicate, "%s: key %s read twice", label, k)
					}
					got[k] = norm(r)
				}
				mu.Lock()
				rep.Rows += n
				rep.Destinations++
				mu.Unlock()
				compare(label, t.Name, want[tenant], got, diff, &rep, &mu)
				return nil
			})
		}
		if err := eg.Wait(); err != nil {
			return rep, err
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func compare(label, table string, want, got map[string]any, diff func(*int, string, ...any), rep *Report, mu *sync.Mutex) {
	count := func(col, example string) {
		mu.Lock()
		defer mu.Unlock()
		cat := table + "." + col
		rep.ByColumn[cat]++
		if len(rep.Examples[cat]) < 2 {
			rep.Examples[cat] = append(rep.Examples[cat], example)
		}
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, inW := want[k]
		g, inG := got[k]
		switch {
		case !inG:
			count("(missing row)", fmt.Sprintf("%s: missing key %s: want %s", label, k, js(w)))
			diff(&rep.Missing, "%s: missing key %s: want %s", label, k, js(w))
		case !inW:
			count("(phantom row)", fmt.Sprintf("%s: phantom key %s: got %s", label, k, js(g)))
			diff(&rep.Phantom, "%s: phantom key %s: got %s", label, k, js(g))
		default:
			if full(w) != full(g) {
				cols := differing(w, g)
				var parts []string
				wm, _ := w.(map[string]any)
				gm, _ := g.(map[string]any)
				for _, c := range cols {
					part := fmt.Sprintf("%s: want %s got %s", c, js(wm[c]), js(gm[c]))
					count(c, fmt.Sprintf("%s key %s: %s", label, k, part))
					if len(parts) < 4 {
						parts = append(parts, part)
					}
				}
				diff(&rep.Differ, "%s: key %s differs in %v: %s", label, k, cols, strings.Join(parts, "; "))
			}
		}
	}
}

// differing names the columns whose values differ.
func differing(w, g any) []string {
	wm, _ := w.(map[string]any)
	gm, _ := g.(map[string]any)
	var out []string
	for k, v := range wm {
		if gv, ok := gm[k]; !ok || full(v) != full(gv) {
			out = append(out, k)
		}
	}
	for k := range gm {
		if _, ok := wm[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// full is a value's canonical JSON, for comparison.
func full(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// js is a value's JSON for messages (long strings abbreviated).
func js(v any) string {
	v = abbreviate(v)
	b, _ := json.Marshal(v)
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// routedTo reports whether a row's routing value (decoded with UseNumber)
// is tenant, the source's value as text: a text value equal to it, or an
// integer one (pgbench's bid) whose digits are it.
func routedTo(v any, tenant string) bool {
	switch v := v.(type) {
	case string:
		return v == tenant
	case json.Number:
		return v.String() == tenant
	}
	return false
}

func decode(line string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decoding %q: %w", line, err)
	}
	return m, nil
}

func keyOf(r map[string]any, keys []string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprint(r[k])
	}
	return strings.Join(parts, "|")
}

// norm puts a JSON value into a canonical form: numbers as exact
// rationals, timestamps as UTC instants (to_jsonb writes +00:00, a reader
// may write Z: the same instant).
func norm(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = norm(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = norm(e)
		}
		return out
	case json.Number:
		r, ok := new(big.Rat).SetString(string(x))
		if !ok {
			return "number:" + string(x)
		}
		return "number:" + r.RatString()
	case string:
		if len(x) >= 19 && x[4] == '-' && x[10] == 'T' {
			for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
				if ts, err := time.Parse(layout, x); err == nil {
					return "ts:" + ts.UTC().Format(time.RFC3339Nano)
				}
			}
		}
		return x
	}
	return v
}

var _ = bytes.Equal

// abbreviate shortens long strings for messages: their first 24
// characters, their length and a hash, so two long values can be told
// apart.
func abbreviate(v any) any {
	switch x := v.(type) {
	case string:
		if len(x) > 80 {
			return fmt.Sprintf("%s…(%d bytes, fnv %08x)", x[:24], len(x), fnv32(x))
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = abbreviate(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = abbreviate(e)
		}
		return out
	}
	return v
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
