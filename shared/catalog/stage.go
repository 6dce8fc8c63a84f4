package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// Staging: the embedded engine reads each file of a per-pack UNION ALL
// with a fixed cost of milliseconds (open, footer, decompression set-up,
// one pipeline branch per file), which bounds an indexer at a few hundred
// small packs per second: 1,000 tenants flushed every second produce
// 1,000 packs of a few rows each. So when the catalog runs on the embedded
// engine, Index copies the small packs of a group into one uncompressed
// staging file, each row tagged with its pack identity, and inserts them
// with one file read. Large packs are read in place (their fixed cost is
// amortized and copying them would double the bytes moved). The staging
// file is deleted after its INSERT; a crash leaves it behind, so stale ones
// are removed at the next start.

// stageMaxBytes is the largest pack (encoded bytes) ReadRef keeps in memory
// for staging: an indexer's queue (1,024 events) and batch hold them, so
// this bounds what they cost.
const stageMaxBytes = 256 << 10

// Staging column names: only in staging files, never in a rows table.
const (
	stageDest  = "_sluice_stage_destination"
	stageStore = "_sluice_stage_store_id"
	stagePack  = "_sluice_stage_pack_id"
)

// staleStaging is how old a staging file must be for a start to remove it.
const staleStaging = 10 * time.Minute

var cleanStaging sync.Map // dir -> *sync.Once

// stagingDir is where Index writes staging files, or "" when the engine
// cannot read this process's files (a ClickHouse server).
func (c *Catalog) stagingDir() string {
	if c.noStaging {
		return ""
	}
	ch, ok := c.conn.(*chdb.Conn)
	if !ok {
		return ""
	}
	dir := filepath.Join(ch.Dir(), "staging")
	once, _ := cleanStaging.LoadOrStore(dir, &sync.Once{})
	once.(*sync.Once).Do(func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleStaging {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	})
	return dir
}

// stagedSQL writes the packs (each carrying its bytes) into one staging
// file under dir and returns the INSERT reading it and the file's path,
// which the caller removes after the INSERT.
func (p insertPlan) stagedSQL(dir, storeID string, packs []PackRef) (query, path string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("creating staging directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "stage-*.arrow")
	if err != nil {
		return "", "", fmt.Errorf("creating staging file: %w", err)
	}
	path = f.Name()
	if err := writeStage(f, storeID, packs); err != nil {
		f.Close()
		os.Remove(path)
		return "", "", fmt.Errorf("writing staging file: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", "", fmt.Errorf("writing staging file: %w", err)
	}
	structure := strings.Join(append(p.structure[:len(p.structure):len(p.structure)],
		ident(stageDest)+" String", ident(stageStore)+" String", ident(stagePack)+" String"), ", ")
	query = "INSERT INTO " + p.table + " (" + p.target + ") SELECT " + ident(stageDest) + ", " + p.common + ", " +
		ident(stageStore) + ", " + ident(stagePack) + " FROM file(" + quote(path) + ", 'Arrow', " + quote(structure) + ")" + p.settings
	return query, path, nil
}

// writeStage writes every record of packs, plus the three identity columns,
// as one Arrow IPC file. Packs of one group share their columns (stageable
// checked it).
func writeStage(f *os.File, storeID string, packs []PackRef) error {
	mem := memory.NewGoAllocator()
	var w *ipc.FileWriter
	var schema *arrow.Schema
	for _, pk := range packs {
		_, recs, err := packstore.DecodePack(pk.data, mem)
		if err != nil {
			return fmt.Errorf("decoding pack %s: %w", pk.Meta.PackID, err)
		}
		for _, rec := range recs {
			// A segment's rows carry their destination (the last column,
			// packstore.EncodeSegment): it becomes the staging column.
			ncols := rec.NumCols()
			var dest arrow.Array
			if pk.Meta.IsSegment() {
				ncols--
				dest = rec.Column(int(ncols))
				dest.Retain()
			}
			if w == nil {
				fields := append(stripMeta(rec.Schema().Fields()[:ncols]),
					arrow.Field{Name: stageDest, Type: arrow.BinaryTypes.String},
					arrow.Field{Name: stageStore, Type: arrow.BinaryTypes.String},
					arrow.Field{Name: stagePack, Type: arrow.BinaryTypes.String})
				schema = arrow.NewSchema(fields, nil)
				w, err = ipc.NewFileWriter(f, ipc.WithSchema(schema), ipc.WithAllocator(mem))
				if err != nil {
					releaseAll(recs)
					return err
				}
			}
			n := int(rec.NumRows())
			if dest == nil {
				dest = constString(mem, pk.Meta.Destination, n)
			}
			cols := append(rec.Columns()[:ncols:ncols], dest, constString(mem, storeID, n), constString(mem, pk.Meta.PackID, n))
			out := array.NewRecordBatch(schema, cols, int64(n))
			for _, c := range cols[ncols:] {
				c.Release()
			}
			err := w.Write(out)
			out.Release()
			if err != nil {
				releaseAll(recs)
				return err
			}
		}
		releaseAll(recs)
	}
	if w == nil {
		return fmt.Errorf("no records in %d packs", len(packs))
	}
	return w.Close()
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

func stripMeta(fs []arrow.Field) []arrow.Field {
	out := make([]arrow.Field, len(fs))
	for i, f := range fs {
		out[i] = arrow.Field{Name: f.Name, Type: f.Type, Nullable: f.Nullable}
	}
	return out
}

func constString(mem memory.Allocator, v string, n int) arrow.Array {
	b := array.NewStringBuilder(mem)
	defer b.Release()
	b.Reserve(n)
	b.ReserveData(n * len(v))
	for range n {
		b.Append(v)
	}
	return b.NewArray()
}

// stageable reports whether p can go into the staging file of a group
// whose first staged pack has schema first: it carries its bytes and has
// exactly the same columns.
func stageable(p PackRef, first *arrow.Schema) bool {
	if p.data == nil || p.Schema == nil {
		return false
	}
	if first == nil {
		return true
	}
	a, b := p.Schema.Fields(), first.Fields()
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Nullable != b[i].Nullable || !arrow.TypeEqual(a[i].Type, b[i].Type) {
			return false
		}
	}
	return true
}

// groupSQL returns the statements that insert the rows of one group, and
// the staging files to remove once they ran.
func (c *Catalog) groupSQL(store packstore.Store, plan insertPlan, packs []PackRef) (stmts, files []string, err error) {
	dir := c.stagingDir()
	var staged, direct []PackRef
	var first *arrow.Schema
	for _, p := range packs {
		if dir != "" && stageable(p, first) {
			if first == nil {
				first = p.Schema
			}
			staged = append(staged, p)
		} else {
			direct = append(direct, p)
		}
	}
	if len(staged) == 1 && len(direct) == 0 {
		direct, staged = staged, nil // one pack: read it in place
	}
	if len(staged) > 0 {
		q, path, err := plan.stagedSQL(dir, store.ID(), staged)
		if err != nil {
			return nil, nil, err
		}
		stmts, files = append(stmts, q), append(files, path)
	}
	if len(direct) > 0 {
		qs, err := plan.unionSQL(store, direct)
		if err != nil {
			for _, f := range files {
				os.Remove(f)
			}
			return nil, nil, err
		}
		stmts = append(stmts, qs...)
	}
	return stmts, files, nil
}
