package workload

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// model is a worker's view of its own rows in one table.
type model struct {
	live   []int64
	pos    map[int64]int // id -> index in live
	tenant map[int64]int // id -> tenant (live and dead)
	dead   []int64       // deleted ids, candidates for re-insert
	next   int64
}

func newModel() *model { return &model{pos: map[int64]int{}, tenant: map[int64]int{}} }

func (m *model) add(id int64, tenant int) {
	m.pos[id] = len(m.live)
	m.live = append(m.live, id)
	m.tenant[id] = tenant
}

func (m *model) remove(id int64) {
	i, ok := m.pos[id]
	if !ok {
		return
	}
	last := m.live[len(m.live)-1]
	m.live[i] = last
	m.pos[last] = i
	m.live = m.live[:len(m.live)-1]
	delete(m.pos, id)
}

type worker struct {
	g      *Generator
	n      int
	r      *rand.Rand
	zipf   *rand.Zipf
	models map[string]*model
	passed bool // passed the add-column barrier

	mu     sync.Mutex // guards digest
	digest hash.Hash
}

// txn collects one transaction's statements and counts.
type txn struct {
	w                                 *worker
	b                                 pgx.Batch
	rows, ins, upd, del, reins, moves int64
	large                             bool
}

func (t *txn) queue(sql string, args ...any) {
	t.b.Queue(sql, args...)
	t.w.mu.Lock()
	digestArgs(t.w.digest, sql, args)
	t.w.mu.Unlock()
	if f := t.w.g.o.OnStatement; f != nil {
		f(t.w.n, sql, args)
	}
}

// transact builds a transaction with fill and commits it; on failure it
// re-reads the worker's rows and tries again with a new transaction until
// it commits or ctx ends.
func (w *worker) transact(ctx context.Context, pool *pgxpool.Pool, fill func(*txn)) error {
	for attempt := 0; ; attempt++ {
		tx := &txn{w: w}
		fill(tx)
		err := w.commit(ctx, pool, tx)
		if err == nil {
			c := &w.g.c
			c.tx.Add(1)
			c.stmts.Add(int64(tx.b.Len()))
			c.rows.Add(tx.rows)
			c.ins.Add(tx.ins)
			c.upd.Add(tx.upd)
			c.del.Add(tx.del)
			c.reins.Add(tx.reins)
			c.moves.Add(tx.moves)
			if tx.large {
				c.large.Add(1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.g.c.retries.Add(1)
		w.g.o.Log.Warn("workload transaction failed; re-syncing", "worker", w.n, "err", err)
		for {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
			if err := w.resync(ctx, pool); err == nil {
				break
			} else if ctx.Err() != nil {
				return ctx.Err()
			}
			attempt++
		}
	}
}

func (w *worker) commit(ctx context.Context, pool *pgxpool.Pool, t *txn) error {
	if t.b.Len() == 0 {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning: %w", err)
	}
	defer tx.Rollback(context.Background())
	br := tx.SendBatch(ctx, &t.b)
	for i := 0; i < t.b.Len(); i++ {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return fmt.Errorf("statement %d (%s): %w", i, t.b.QueuedQueries[i].SQL, err)
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("closing batch: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// resync rebuilds the worker's models from the database after a failed
// (or unknown-outcome) transaction.
func (w *worker) resync(ctx context.Context, pool *pgxpool.Pool) error {
	for _, ts := range Tables() {
		rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT %s, id FROM %s WHERE id %% $1 = $2`, ts.Routing, ts.Name), w.g.o.Workers, w.n)
		if err != nil {
			return fmt.Errorf("re-reading %s: %w", ts.Name, err)
		}
		m := w.models[ts.Name]
		fresh := newModel()
		fresh.next = m.next
		for rows.Next() {
			var tenant string
			var id int64
			if err := rows.Scan(&tenant, &id); err != nil {
				rows.Close()
				return fmt.Errorf("re-reading %s: %w", ts.Name, err)
			}
			fresh.add(id, w.g.index[tenant])
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("re-reading %s: %w", ts.Name, err)
		}
		for _, id := range m.dead {
			if _, live := fresh.pos[id]; !live {
				fresh.dead = append(fresh.dead, id)
				fresh.tenant[id] = m.tenant[id]
			}
		}
		w.models[ts.Name] = fresh
	}
	return nil
}

// tenant picks the tenant of a new row of table: skewed (Zipf) over
// Options.Tenants, or uniform over Options.ManyTenants in wl_events.
func (w *worker) tenant(table string) int {
	if table == Events {
		return w.r.IntN(w.g.o.ManyTenants)
	}
	return int(w.zipf.Uint64())
}

// tenantCount is the size of table's tenant space.
func (w *worker) tenantCount(table string) int {
	if table == Events {
		return w.g.o.ManyTenants
	}
	return w.g.o.Tenants
}

// name is the routing value of tenant i of table; Run records it as
// touched.
func (w *worker) name(table string, i int) string {
	n := w.g.tenants
	if table == Events {
		n = w.g.many
	}
	if w.g.tracking.Load() {
		w.g.touched.add(table, n[i])
	}
	return n[i]
}

func (w *worker) newID(table string) int64 {
	m := w.models[table]
	id := m.next*int64(w.g.o.Workers) + int64(w.n)
	m.next++
	return id
}

// tableWeights weighs the tables an operation picks from; wl_events
// weighs Options.EventsWeight.
var tableWeights = []struct {
	name string
	w    int
}{{Orders, 50}, {Accounts, 30}, {Wide, 20}, {Docs, 10}}

func (w *worker) pickTable() string {
	total := w.g.o.EventsWeight
	for _, t := range tableWeights {
		total += t.w
	}
	n := w.r.IntN(total)
	for _, t := range tableWeights {
		if n < t.w {
			return t.name
		}
		n -= t.w
	}
	return Events
}

// op adds one random operation to tx.
func (w *worker) op(tx *txn) {
	mix := w.g.o.Mix
	table := w.pickTable()
	if table == Events {
		mix = EventsMix
	}
	m := w.models[table]
	total := mix.Insert + mix.Update + mix.Delete + mix.Reinsert + mix.Move
	n := w.r.IntN(max(total, 1))
	switch {
	case n < mix.Insert || len(m.live) == 0:
		w.insert(tx, table, w.tenant(table))
	case n < mix.Insert+mix.Update:
		w.update(tx, table, m.live[w.r.IntN(len(m.live))])
	case n < mix.Insert+mix.Update+mix.Delete:
		w.delete(tx, table, m.live[w.r.IntN(len(m.live))])
	case n < mix.Insert+mix.Update+mix.Delete+mix.Reinsert:
		if len(m.dead) == 0 {
			w.insert(tx, table, w.tenant(table))
			return
		}
		i := w.r.IntN(len(m.dead))
		id := m.dead[i]
		m.dead[i] = m.dead[len(m.dead)-1]
		m.dead = m.dead[:len(m.dead)-1]
		tenant := m.tenant[id]
		if table == Accounts && w.r.IntN(2) == 0 {
			tenant = w.tenant(table) // a re-inserted key may come back in another tenant
		}
		w.insertID(tx, table, id, tenant)
		tx.reins++
		tx.ins--
	default:
		w.move(tx, table, m.live[w.r.IntN(len(m.live))])
	}
}

func (w *worker) insert(tx *txn, table string, tenant int) {
	w.insertID(tx, table, w.newID(table), tenant)
}

func (w *worker) text(n int) *string {
	const letters = "abcdefghijklmnopqrstuvwxyz ,.'\"é"
	r := []rune(letters)
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteRune(r[w.r.IntN(len(r))])
	}
	return s(b.String())
}

func (w *worker) money() string {
	return fmt.Sprintf("%d.%02d", w.r.IntN(100000), w.r.IntN(100))
}

func (w *worker) body() *string {
	b := make([]byte, w.g.o.DocBytes/2)
	for i := 0; i < len(b); i += 8 {
		v := w.r.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return s(hex.EncodeToString(b))
}

var statuses = []string{"placed", "paid", "shipped", "delivered", "refunded", "cancelled"}

// payload is a wl_events payload: every 2nd row (by id) has one large
// enough to be stored out of line.
func (w *worker) payload(id int64) *string {
	if id%2 != 0 {
		return w.text(w.r.IntN(20))
	}
	b := make([]byte, w.g.o.PayloadBytes/2)
	for i := 0; i < len(b); i += 8 {
		v := w.r.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return s(hex.EncodeToString(b))
}

var kinds = []string{"click", "view", "signup", "purchase", "churn"}

func (w *worker) insertID(tx *txn, table string, id int64, tenant int) {
	name := w.name(table, tenant)
	switch table {
	case Orders:
		tags := arrayGen(textGen(8), true)(w.r, w.r.IntN(10) == 0)
		placed := timestampGen(true)(w.r, false)
		if w.g.added.Load() && w.passed {
			tx.queue(`INSERT INTO public.wl_orders (tenant_id, id, customer_id, status, total, tags, note, placed_at, `+AddedColumn+`)
				VALUES ($1, $2, $3, $4, $5::text::numeric, $6::text::text[], $7, $8::text::timestamptz, $9)`,
				name, id, w.r.Int64N(100000), statuses[w.r.IntN(len(statuses))], w.money(), tags, w.text(w.r.IntN(40)), placed, w.r.IntN(10))
		} else {
			tx.queue(`INSERT INTO public.wl_orders (tenant_id, id, customer_id, status, total, tags, note, placed_at)
				VALUES ($1, $2, $3, $4, $5::text::numeric, $6::text::text[], $7, $8::text::timestamptz)`,
				name, id, w.r.Int64N(100000), statuses[w.r.IntN(len(statuses))], w.money(), tags, w.text(w.r.IntN(40)), placed)
		}
	case Accounts:
		tx.queue(`INSERT INTO public.wl_accounts (id, org_id, name, balance, active, opened, meta)
			VALUES ($1, $2, $3, $4::text::numeric, $5, $6::text::date, $7::text::jsonb)`,
			id, name, w.text(12), numericGen(w.r, w.r.IntN(20) == 0), w.r.IntN(2) == 0, dateGen(w.r, false), jsonGen(true)(w.r, false))
	case Wide:
		cols := []string{"tenant_id", "id"}
		vals := []string{"$1", "$2"}
		args := []any{name, id}
		for _, c := range wideColumns {
			var v *string
			if w.r.IntN(12) != 0 { // NULL now and then
				v = c.gen(w.r, w.r.Float64() < w.g.o.Edge)
			}
			args = append(args, v)
			cols = append(cols, c.name)
			vals = append(vals, fmt.Sprintf("$%d::text::%s", len(args), c.typ))
		}
		tx.queue(`INSERT INTO public.wl_wide (`+strings.Join(cols, ", ")+`) VALUES (`+strings.Join(vals, ", ")+`)`, args...)
	case Docs:
		tx.queue(`INSERT INTO public.wl_docs (tenant_id, id, title, version, body) VALUES ($1, $2, $3, 1, $4)`,
			name, id, w.text(20), w.body())
	case Events:
		tx.queue(`INSERT INTO public.wl_events (tenant_id, id, kind, n, payload) VALUES ($1, $2, $3, $4, $5)`,
			name, id, kinds[w.r.IntN(len(kinds))], w.r.IntN(1000), w.payload(id))
	}
	w.models[table].add(id, tenant)
	tx.rows++
	tx.ins++
}

// where is the key predicate of a row, starting at placeholder $1.
func (w *worker) where(table string, id int64) (string, []any) {
	tenant := w.name(table, w.models[table].tenant[id])
	if table == Accounts {
		return "id = $1", []any{id}
	}
	return "tenant_id = $1 AND id = $2", []any{tenant, id}
}

func (w *worker) update(tx *txn, table string, id int64) {
	pred, args := w.where(table, id)
	p := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	switch table {
	case Orders:
		set := fmt.Sprintf("status = %s, total = total + %s::text::numeric, note = %s, tags = tags || %s::text",
			p(statuses[w.r.IntN(len(statuses))]), p(w.money()), p(w.text(w.r.IntN(30))), p(*w.text(5)))
		if w.g.added.Load() && w.passed && w.r.IntN(2) == 0 {
			set += ", " + AddedColumn + " = " + p(w.r.IntN(100))
		}
		tx.queue(`UPDATE public.wl_orders SET `+set+` WHERE `+pred, args...)
	case Accounts:
		set := fmt.Sprintf("balance = balance + %s::text::numeric, active = NOT active", p(w.money()))
		if w.r.IntN(2) == 0 {
			set += ", meta = " + p(jsonGen(true)(w.r, w.r.IntN(10) == 0)) + "::text::jsonb"
		}
		tx.queue(`UPDATE public.wl_accounts SET `+set+` WHERE `+pred, args...)
	case Wide:
		var sets []string
		for _, i := range w.r.Perm(len(wideColumns))[:w.r.IntN(5)+1] {
			c := wideColumns[i]
			var v *string
			if w.r.IntN(8) != 0 {
				v = c.gen(w.r, w.r.Float64() < w.g.o.Edge)
			}
			sets = append(sets, fmt.Sprintf("%s = %s::text::%s", c.name, p(v), c.typ))
		}
		tx.queue(`UPDATE public.wl_wide SET `+strings.Join(sets, ", ")+` WHERE `+pred, args...)
	case Docs:
		set := fmt.Sprintf("title = %s, version = version + 1", p(w.text(20)))
		if w.r.IntN(5) == 0 {
			set += ", body = " + p(w.body())
		}
		tx.queue(`UPDATE public.wl_docs SET `+set+` WHERE `+pred, args...)
	case Events:
		// The payload mostly stays: pgoutput sends it as unchanged TOAST.
		set := fmt.Sprintf("n = n + %s, kind = %s", p(w.r.IntN(100)+1), p(kinds[w.r.IntN(len(kinds))]))
		if w.r.IntN(6) == 0 {
			set += ", payload = " + p(w.payload(id))
		}
		tx.queue(`UPDATE public.wl_events SET `+set+` WHERE `+pred, args...)
	}
	tx.rows++
	tx.upd++
}

func (w *worker) delete(tx *txn, table string, id int64) {
	pred, args := w.where(table, id)
	tx.queue(`DELETE FROM `+table+` WHERE `+pred, args...)
	m := w.models[table]
	m.remove(id)
	m.dead = append(m.dead, id)
	tx.rows++
	tx.del++
}

// move changes a row's routing value: a delete in the old destination and
// an insert in the new one.
func (w *worker) move(tx *txn, table string, id int64) {
	m := w.models[table]
	to := w.tenant(table)
	if to == m.tenant[id] {
		to = (to + 1) % w.tenantCount(table)
	}
	pred, args := w.where(table, id)
	p := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	col := "tenant_id"
	if table == Accounts {
		col = "org_id"
	}
	set := col + " = " + p(w.name(table, to))
	switch table {
	case Orders:
		set += ", status = " + p("moved")
	case Docs:
		if w.r.IntN(100) >= w.g.o.Mix.MoveToast {
			set += ", body = " + p(w.body())
		}
	case Events:
		// Usually the payload moves untouched: the new destination gets
		// an unchanged-TOAST marker for a row it has never seen.
		set += ", n = n + 1"
		if w.r.IntN(100) >= w.g.o.Mix.MoveToast {
			set += ", payload = " + p(w.payload(id))
		}
	}
	tx.queue(`UPDATE `+table+` SET `+set+` WHERE `+pred, args...)
	m.tenant[id] = to
	tx.rows++
	tx.moves++
}

// large is one big transaction in one tenant: LargeRows inserts into
// wl_orders, then updates and deletes of some of them.
func (w *worker) large(tx *txn) {
	tx.large = true
	tenant := w.tenant(Orders)
	name := w.name(Orders, tenant)
	m := w.models[Orders]
	ids := make([]int64, w.g.o.LargeRows*3/4)
	for i := range ids {
		ids[i] = w.newID(Orders)
		m.add(ids[i], tenant)
	}
	tx.queue(`INSERT INTO public.wl_orders (tenant_id, id, customer_id, status, total, tags, note, placed_at)
		SELECT $1, id, id % 1000, 'bulk', (id % 100000)::numeric / 100, ARRAY['bulk', NULL], repeat('x', (id % 50)::int),
		       timestamptz '2026-01-01 00:00:00+00' + (id % 100000) * interval '1 second'
		FROM unnest($2::bigint[]) AS u(id)`, name, ids)
	upd := ids[:len(ids)/4]
	tx.queue(`UPDATE public.wl_orders SET status = 'bulk-updated', total = total + 1 WHERE tenant_id = $1 AND id = ANY($2::bigint[])`, name, upd)
	del := ids[len(ids)-len(ids)/12:]
	tx.queue(`DELETE FROM public.wl_orders WHERE tenant_id = $1 AND id = ANY($2::bigint[])`, name, del)
	for _, id := range del {
		m.remove(id)
		m.dead = append(m.dead, id)
	}
	tx.rows += int64(len(ids) + len(upd) + len(del))
	tx.ins += int64(len(ids))
	tx.upd += int64(len(upd))
	tx.del += int64(len(del))
}
