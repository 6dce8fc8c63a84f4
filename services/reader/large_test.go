package reader

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// md5File is the hex MD5 of a file, streamed (the test holds no value
// whole, so the heap it measures is the reader's).
func md5File(t *testing.T, path string) (string, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := md5.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// A value over reader.max_inline_value travels by reference: the reader
// writes it to the pack store at its claim path and the message carries
// the column's name in _sluice_claims, so values of any size Postgres
// allows flow (12 MB and 200 MB here) without a message over
// nats.max_payload, beside the small rows of the same table, and the
// reader's heap stays within base + 2 × the largest value (pgoutput sends a
// tuple in one CopyData message, which the reader holds while it writes the
// value out). Before, the 12 MB row halted the table ("batch larger than
// nats.max_payload") and the rows after it never arrived.
func TestLargeValuesByReference(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200 MB")
	}
	e := newEnv(t, "public.blobs")
	e.exec(`CREATE TABLE blobs (tenant_id text, id int, title text, body text, PRIMARY KEY (tenant_id, id))`)
	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	run := e.start(e.newReader("a", func(r *Reader) { r.deps.Packs = store }))
	waitStreaming(t, run)

	const mb = 1 << 20
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	e.exec(`INSERT INTO blobs VALUES ('t', 1, 'small', 'hello')`)
	e.exec(fmt.Sprintf(`BEGIN; INSERT INTO blobs VALUES ('t', 2, 'twelve', repeat('a', %d));
		INSERT INTO blobs VALUES ('t', 3, 'after', 'x'); COMMIT`, 12*mb))
	e.exec(fmt.Sprintf(`INSERT INTO blobs VALUES ('t', 4, 'two hundred', repeat('b', %d))`, 200*mb))
	// Two values under the threshold whose sum is over it: the larger goes.
	e.exec(fmt.Sprintf(`INSERT INTO blobs VALUES ('t', 6, repeat('t', %d), repeat('c', %d))`, 600<<10, 700<<10))
	e.exec(`INSERT INTO blobs VALUES ('t', 5, 'last', 'world')`)
	rows := waitRows(t, e, 6)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	_, _, msgs := e.changes()
	for _, m := range msgs {
		if len(m.Data) > int(e.cfg.NATS.MaxPayload) {
			t.Errorf("message %s of %d bytes, over nats.max_payload %d", m.Header.Get(proto.HeaderMsgID), len(m.Data), e.cfg.NATS.MaxPayload)
		}
	}
	// Each batch carrying a value by reference says its size, which the
	// flusher counts in its memory budget (proto.HeaderClaimBytes).
	var claimed []string
	for _, m := range msgs {
		if v := m.Header.Get(proto.HeaderClaimBytes); v != "" {
			claimed = append(claimed, v)
		}
	}
	wantClaimed := []string{strconv.Itoa(200 * mb), strconv.Itoa(12 * mb), strconv.Itoa(700 << 10)}
	slices.Sort(claimed)
	slices.Sort(wantClaimed)
	if !slices.Equal(claimed, wantClaimed) {
		t.Errorf("%s headers %v, want %v", proto.HeaderClaimBytes, claimed, wantClaimed)
	}
	want := map[int][]string{2: {"body"}, 4: {"body"}, 6: {"body"}}
	for _, r := range rows {
		id := int(r.vals["id"].(int64))
		if !slices.Equal(r.claims, want[id]) {
			t.Errorf("row %d claims %v, want %v", id, r.claims, want[id])
		}
		if len(r.claims) == 0 {
			if r.vals["body"] == nil {
				t.Errorf("row %d: inline body is NULL", id)
			}
			continue
		}
		if r.vals["body"] != nil {
			t.Errorf("row %d: claimed body also inline", id)
		}
		var sum string
		var n int64
		pool := e.statePool()
		if err := pool.QueryRow(context.Background(), `SELECT md5(body), length(body) FROM blobs WHERE id = $1`, id).Scan(&sum, &n); err != nil {
			t.Fatal(err)
		}
		pool.Close()
		got, size := md5File(t, filepath.Join(store.Root(), filepath.FromSlash(proto.ClaimPath("public.blobs", r.pos, "body"))))
		if got != sum || size != n {
			t.Errorf("row %d: claim object %d bytes md5 %s; source %d bytes md5 %s", id, size, got, n, sum)
		}
	}
	grew := int64(after.HeapSys) - int64(before.HeapSys)
	bound := int64(64*mb + 2*200*mb)
	t.Logf("heap reserved grew by %d MiB (bound %d MiB); peak heap in use is at most that", grew/mb, bound/mb)
	if grew > bound {
		t.Errorf("heap reserved grew by %d MiB, over base + 2 × the largest value (%d MiB)", grew/mb, bound/mb)
	}
}

// A batch whose encoding exceeds nats.max_payload although its estimate is
// under reader.batch_bytes (bigint arrays of small numbers: 2 bytes of text,
// 8 of Arrow per element) is split in halves until every message fits,
// rather than halting its table.
func TestBatchSplitByEncodedBytes(t *testing.T) {
	e := newEnv(t, "public.arr")
	e.cfg.NATS.MaxPayload = 1 << 20
	e.cfg.Reader.BatchBytes = 900 << 10
	e.exec(`CREATE TABLE arr (tenant_id text, id int, xs bigint[], PRIMARY KEY (tenant_id, id))`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO arr SELECT 't', i, array_fill(1::bigint, ARRAY[50000]) FROM generate_series(1, 40) i`)
	e.exec(`INSERT INTO arr VALUES ('t', 41, '{2}')`)
	rows := waitRows(t, e, 41)
	_, _, msgs := e.changes()
	for _, m := range msgs {
		if len(m.Data) > int(e.cfg.NATS.MaxPayload) {
			t.Errorf("message %s of %d bytes, over nats.max_payload %d", m.Header.Get(proto.HeaderMsgID), len(m.Data), e.cfg.NATS.MaxPayload)
		}
	}
	if h := run.r.Status().Halted["public.arr"]; h != "" {
		t.Errorf("halted: %s", h)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.pos.String()] {
			t.Errorf("row at %s published twice", r.pos)
		}
		seen[r.pos.String()] = true
	}
	if len(msgs) < 8 {
		t.Errorf("%d messages for 40 rows of ~400 KB: not split", len(msgs))
	}
}

// The backfill carries values over reader.max_inline_value by reference as
// the stream does: the row goes alone, after the rows before it, with its
// object in the pack store.
func TestBackfillLargeValueByReference(t *testing.T) {
	e := newEnv(t, "public.blobs")
	e.cfg.Source.Backfill = true
	e.exec(`CREATE TABLE blobs (tenant_id text, id int, body text, PRIMARY KEY (tenant_id, id));
		INSERT INTO blobs VALUES ('t', 1, 'a'), ('t', 2, repeat('b', 3 << 20)), ('t', 3, 'c');`)
	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	e.start(e.newReader("a", func(r *Reader) { r.deps.Packs = store }))
	rows := waitRows(t, e, 3)
	_, _, msgs := e.changes()
	var claimed []string
	for _, m := range msgs {
		if v := m.Header.Get(proto.HeaderClaimBytes); v != "" {
			claimed = append(claimed, v)
		}
	}
	if !slices.Equal(claimed, []string{strconv.Itoa(3 << 20)}) {
		t.Errorf("%s headers %v, want one of %d", proto.HeaderClaimBytes, claimed, 3<<20)
	}
	for _, r := range rows {
		id := r.vals["id"].(int64)
		if (id == 2) != slices.Equal(r.claims, []string{"body"}) || (id == 2) != (r.vals["body"] == nil) {
			t.Errorf("row %d: claims %v, body inline %v", id, r.claims, r.vals["body"] != nil)
		}
		if id == 2 {
			_, size := md5File(t, filepath.Join(store.Root(), filepath.FromSlash(proto.ClaimPath("public.blobs", r.pos, "body"))))
			if size != 3<<20 {
				t.Errorf("claim object of %d bytes, want %d", size, 3<<20)
			}
		}
	}
}
