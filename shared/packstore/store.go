package packstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/sluice-cdc/sluice/shared/secret"
)

// Store is where packs live. Paths are store-relative, "/"-separated and
// follow the layout <destination>/<table>/<file> (proto.PackPath).
type Store interface {
	// ID is the store's identity, recorded in every pack's footer and in the
	// catalog's sort key.
	ID() string
	// Put writes data at path atomically: a reader sees either nothing or
	// the whole pack. Writing the same bytes again is a no-op; different
	// bytes at an existing path fail with ErrImmutable.
	Put(ctx context.Context, path string, data []byte) error
	// Get returns the pack at path, or an error wrapping ErrNotFound.
	Get(ctx context.Context, path string) ([]byte, error)
	// List calls fn for every pack whose path starts with prefix, in lexical
	// order of the path. An error from fn stops the walk and is returned.
	// Segments (under proto.SegmentsDir) are listed only by a prefix under
	// proto.SegmentsDir+"/": the per-destination layout's listings never
	// see them.
	List(ctx context.Context, prefix string, fn func(path string) error) error
	// TableFunction is a ClickHouse table function that reads the pack at
	// path, e.g. file('/abs/path', 'Arrow').
	TableFunction(path string) string
}

// tempPrefix starts the name of a pack being written (see Put).
const tempPrefix = ".tmp-"

var (
	fileRe    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$`)
	storeIDRe = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
)

// DirStore is a Store in a local directory.
type DirStore struct {
	root string // absolute
	id   string

	// noLink makes Put rename instead of link: a test knob that switches the
	// no-clobber rule off (negative control).
	noLink bool
	// fsyncEach makes PutMany fsync every file and directory instead of two
	// filesystem syncs (see syncfs.go); forced where syncfs cannot report
	// errors, and a test knob for the comparison.
	fsyncEach bool
}

// OpenDir opens (creating it if needed) a directory store. storeID is the
// store's identity; empty means "local".
func OpenDir(dir, storeID string) (*DirStore, error) {
	if storeID == "" {
		storeID = "local"
	}
	if !storeIDRe.MatchString(storeID) {
		return nil, fmt.Errorf("opening pack directory: store id %q: want 1-128 of [A-Za-z0-9_.:-]", storeID)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("opening pack directory %s: %w", dir, err)
	}
	// Packs are every tenant's rows: the owner's alone (secret.PrivateDir:
	// 0700, an existing open one narrowed); files 0600 (writeFile).
	if err := secret.PrivateDir(abs); err != nil {
		return nil, fmt.Errorf("opening pack directory %s: %w", abs, err)
	}
	return &DirStore{root: abs, id: storeID, fsyncEach: !syncfsReliable}, nil
}

// ID implements Store.
func (d *DirStore) ID() string { return d.id }

// Root is the store's absolute directory.
func (d *DirStore) Root() string { return d.root }

func (d *DirStore) abs(path string) string {
	return filepath.Join(d.root, filepath.FromSlash(path))
}

// Put implements Store.
func (d *DirStore) Put(ctx context.Context, path string, data []byte) error {
	if err := ValidatePath(path); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing pack %s: %w", path, err)
	}
	final := d.abs(path)
	dir := filepath.Dir(final)
	if same, err := sameContent(final, data); err == nil {
		if same {
			return nil
		}
		return fmt.Errorf("writing pack %s: %w", path, ErrImmutable)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("writing pack %s: %w", path, err)
	}
	if err := d.mkdirDurable(dir); err != nil {
		return fmt.Errorf("writing pack %s: %w", path, err)
	}
	tmp, err := writeTemp(dir, data)
	if err != nil {
		return fmt.Errorf("writing pack %s: %w", path, err)
	}
	defer os.Remove(tmp)
	if d.noLink {
		if err := os.Rename(tmp, final); err != nil {
			return fmt.Errorf("writing pack %s: %w", path, err)
		}
	} else if err := os.Link(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Lost a race with another writer of the same path.
			same, cerr := sameContent(final, data)
			if cerr != nil {
				return fmt.Errorf("writing pack %s: %w", path, cerr)
			}
			if !same {
				return fmt.Errorf("writing pack %s: %w", path, ErrImmutable)
			}
			return nil
		}
		return fmt.Errorf("writing pack %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("writing pack %s: syncing directory: %w", path, err)
	}
	return nil
}

// PutItem is one pack of a PutMany.
type PutItem struct {
	Path string
	Data []byte
}

// BatchPutter is a Store that can write many packs sharing the cost of
// making them durable (group commit).
type BatchPutter interface {
	// PutMany writes every item as Put would (atomic, immutable,
	// idempotent) and returns one error (nil on success) per item. An item
	// is durable once its error is nil; a failed item leaves no pack.
	PutMany(ctx context.Context, items []PutItem) []error
}

// syncParallel bounds the fsyncs one PutMany runs at once.
const syncParallel = 64

// PutMany implements BatchPutter with group commit: every temp file is
// written, then all are fsynced concurrently (the filesystem folds
// concurrent fsyncs into few journal commits), then linked into place,
// then every directory that gained an entry (and the parent of every
// directory created) is fsynced once. A pack is never linked before its
// bytes are durable, and PutMany returns only after the links are.
func (d *DirStore) PutMany(ctx context.Context, items []PutItem) []error {
	errs := make([]error, len(items))
	type work struct {
		i        int
		tmp, dir string
		exists   bool // same bytes already at the path
		created  []string
	}
	wk := make([]*work, len(items))
	// Each item up to its data barrier (check, mkdir, write, fsync), on
	// syncParallel goroutines so the fsyncs overlap.
	parallel(len(items), func(i int) {
		it := items[i]
		if err := ValidatePath(it.Path); err != nil {
			errs[i] = err
			return
		}
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("writing pack %s: %w", it.Path, err)
			return
		}
		final := d.abs(it.Path)
		dir := filepath.Dir(final)
		if same, err := sameContent(final, it.Data); err == nil {
			if !same {
				errs[i] = fmt.Errorf("writing pack %s: %w", it.Path, ErrImmutable)
				return
			}
			// Already there (a retry after a failed directory sync, say):
			// sync its directory again before calling it durable.
			wk[i] = &work{i: i, dir: dir, exists: true}
			return
		} else if !errors.Is(err, fs.ErrNotExist) {
			errs[i] = fmt.Errorf("writing pack %s: %w", it.Path, err)
			return
		}
		created, err := d.mkdirs(dir)
		if err != nil {
			errs[i] = fmt.Errorf("writing pack %s: %w", it.Path, err)
			return
		}
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		tmp := filepath.Join(dir, tempPrefix+hex.EncodeToString(rnd[:]))
		if err := writeFile(tmp, it.Data, d.fsyncEach); err != nil {
			_ = os.Remove(tmp)
			errs[i] = fmt.Errorf("writing pack %s: %w", it.Path, err)
			return
		}
		wk[i] = &work{i: i, tmp: tmp, dir: dir, created: created}
	})
	var ws []*work
	dirs := map[string]bool{} // directories to fsync after linking
	for _, w := range wk {
		if w == nil {
			continue
		}
		ws = append(ws, w)
		if w.exists {
			dirs[w.dir] = true
		}
		for _, c := range w.created {
			dirs[filepath.Dir(c)] = true
		}
	}
	defer func() {
		for _, w := range ws {
			if !w.exists {
				_ = os.Remove(w.tmp)
			}
		}
	}()
	if !d.fsyncEach {
		// Data barrier for every temp file at once.
		if err := d.syncfs(); err != nil {
			for _, w := range ws {
				if errs[w.i] == nil {
					errs[w.i] = fmt.Errorf("writing pack %s: syncing the filesystem: %w", items[w.i].Path, err)
				}
			}
			return errs
		}
	}
	for _, w := range ws {
		if errs[w.i] != nil || w.exists {
			continue
		}
		path := items[w.i].Path
		final := d.abs(path)
		var err error
		if d.noLink {
			err = os.Rename(w.tmp, final)
		} else {
			err = os.Link(w.tmp, final)
		}
		if err != nil {
			if !d.noLink && errors.Is(err, fs.ErrExist) {
				// Lost a race with another writer of the same path.
				same, cerr := sameContent(final, items[w.i].Data)
				switch {
				case cerr != nil:
					errs[w.i] = fmt.Errorf("writing pack %s: %w", path, cerr)
				case !same:
					errs[w.i] = fmt.Errorf("writing pack %s: %w", path, ErrImmutable)
				default:
					dirs[w.dir] = true
				}
				continue
			}
			errs[w.i] = fmt.Errorf("writing pack %s: %w", path, err)
			continue
		}
		dirs[w.dir] = true
	}
	// Metadata barrier: the new entries (and new directories).
	if !d.fsyncEach {
		if err := d.syncfs(); err != nil {
			for _, w := range ws {
				if errs[w.i] == nil {
					errs[w.i] = fmt.Errorf("writing pack %s: syncing the filesystem: %w", items[w.i].Path, err)
				}
			}
		}
		return errs
	}
	dl := make([]string, 0, len(dirs))
	for dir := range dirs {
		dl = append(dl, dir)
	}
	sort.Strings(dl)
	dirErr := make([]error, len(dl))
	parallel(len(dl), func(k int) { dirErr[k] = syncDir(dl[k]) })
	failed := map[string]error{}
	for k, err := range dirErr {
		if err != nil {
			failed[dl[k]] = err
		}
	}
	if len(failed) > 0 {
		for _, w := range ws {
			if errs[w.i] != nil {
				continue
			}
			// A pack whose directory (or an ancestor created here) failed
			// to sync is not known durable.
			for dir, err := range failed {
				if w.dir == dir || strings.HasPrefix(w.dir, dir+string(filepath.Separator)) {
					errs[w.i] = fmt.Errorf("writing pack %s: syncing directory %s: %w", items[w.i].Path, dir, err)
					break
				}
			}
		}
	}
	return errs
}

// parallel runs f(0..n-1) on at most syncParallel goroutines and waits.
func parallel(n int, f func(k int)) {
	if n == 0 {
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for g := 0; g < min(n, syncParallel); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				f(k)
			}
		}()
	}
	for k := 0; k < n; k++ {
		next <- k
	}
	close(next)
	wg.Wait()
}

// mkdirs creates dir and any missing parents below the root, returning the
// directories it created (their parents need an fsync).
func (d *DirStore) mkdirs(dir string) ([]string, error) {
	var created []string
	for p := dir; p != d.root && len(p) > len(d.root); p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		created = append(created, p)
	}
	if len(created) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, secret.DirMode); err != nil {
		return nil, err
	}
	return created, nil
}

// mkdirDurable creates dir and any missing parents below the root, and
// fsyncs the parent of every directory it created, so a pack's path
// survives a power loss along with the pack.
func (d *DirStore) mkdirDurable(dir string) error {
	var created []string
	for p := dir; p != d.root && len(p) > len(d.root); p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		created = append(created, p)
	}
	if len(created) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, secret.DirMode); err != nil {
		return err
	}
	for _, p := range created {
		if err := syncDir(filepath.Dir(p)); err != nil {
			return fmt.Errorf("syncing directory %s: %w", filepath.Dir(p), err)
		}
	}
	return nil
}

func sameContent(path string, data []byte) (bool, error) {
	old, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	return bytes.Equal(old, data), nil
}

func writeSync(path string, data []byte) error { return writeFile(path, data, true) }

// writeFile creates path with data, fsynced when sync is set.
func writeFile(path string, data []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, secret.FileMode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Get implements Store.
func (d *DirStore) Get(ctx context.Context, path string) ([]byte, error) {
	if err := ValidatePath(path); err != nil {
		return nil, err
	}
	return d.read(ctx, "pack", path)
}

// read returns the file at path (a pack or a claim: what names it in errors).
func (d *DirStore) read(ctx context.Context, what, path string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, path, err)
	}
	b, err := os.ReadFile(d.abs(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading %s %s: %w", what, path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, path, err)
	}
	return b, nil
}

// writeTemp writes data durably to a new temporary file in dir (removed
// again on error) and returns its path.
func writeTemp(dir string, data []byte) (string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, tempPrefix+hex.EncodeToString(rnd[:]))
	if err := writeSync(tmp, data); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// ListerAfter is a Store that lists from a point in path order without
// reading what comes before it (a directory walk that skips the
// directories before it, S3 ListObjectsV2 StartAfter).
type ListerAfter interface {
	// ListAfter is List restricted to the paths that sort after
	// startAfter ("" : every path).
	ListAfter(ctx context.Context, prefix, startAfter string, fn func(path string) error) error
}

// ListAfter calls fn for every pack under prefix whose path sorts after
// startAfter, in path order: through the store's ListAfter when it has
// one, else by filtering its List.
func ListAfter(ctx context.Context, s Store, prefix, startAfter string, fn func(path string) error) error {
	if la, ok := s.(ListerAfter); ok {
		return la.ListAfter(ctx, prefix, startAfter, fn)
	}
	return s.List(ctx, prefix, func(path string) error {
		if path <= startAfter {
			return nil
		}
		return fn(path)
	})
}

// List implements Store. Temporary files (names starting with ".") are
// never listed.
func (d *DirStore) List(ctx context.Context, prefix string, fn func(path string) error) error {
	return d.ListAfter(ctx, prefix, "", fn)
}

// ListAfter implements ListerAfter: directories whose every path sorts
// before startAfter are not read.
func (d *DirStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(path string) error) error {
	if err := validatePrefix(prefix); err != nil {
		return err
	}
	// Start the walk at the deepest complete directory of the prefix.
	startRel := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		startRel = prefix[:i]
	}
	start := d.root
	if startRel != "" {
		start = d.abs(startRel)
	}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		names := make([]string, 0, len(ents))
		isDir := make(map[string]bool, len(ents))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			names = append(names, e.Name())
			isDir[e.Name()] = e.IsDir()
		}
		// Lexical order of full paths: a directory "a" sorts as "a/".
		sort.Slice(names, func(i, j int) bool {
			a, b := names[i], names[j]
			if isDir[a] {
				a += "/"
			}
			if isDir[b] {
				b += "/"
			}
			return a < b
		})
		for _, n := range names {
			p := n
			if rel != "" {
				p = rel + "/" + n
			}
			if isDir[n] {
				// Prune subtrees that cannot match the prefix.
				pd := p + "/"
				if !strings.HasPrefix(pd, prefix) && !strings.HasPrefix(prefix, pd) {
					continue
				}
				// Every path under pd sorts before startAfter.
				if startAfter != "" && pd < startAfter && !strings.HasPrefix(startAfter, pd) {
					continue
				}
				if err := walk(filepath.Join(dir, n), p); err != nil {
					return err
				}
				continue
			}
			if !strings.HasPrefix(p, prefix) || p <= startAfter || ValidatePath(p) != nil {
				continue
			}
			if err := fn(p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(start, startRel); err != nil {
		return fmt.Errorf("listing packs under %q: %w", prefix, err)
	}
	return nil
}

// TableFunction implements Store: file('<absolute path>', 'Arrow'), the
// path escaped for a ClickHouse string literal.
func (d *DirStore) TableFunction(path string) string {
	return "file(" + QuoteString(d.abs(path)) + ", 'Arrow')"
}

// QuoteString renders s as a ClickHouse single-quoted string literal.
func QuoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

var (
	_ Store       = (*DirStore)(nil)
	_ BatchPutter = (*DirStore)(nil)
	_ ListerAfter = (*DirStore)(nil)
)
