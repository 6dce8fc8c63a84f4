package packstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

// TempMaxAge is how old (by modification time) a temporary file of Put or
// PutMany must be before CleanTemp removes it. A writer holds its temporary
// file for the time of one write, one fsync or filesystem sync and one
// link: seconds, even on a stalled disk; an hour is far above that, so a
// file this old is one a killed writer left. Were a live writer ever that
// slow, its link would fail and its flush be retried: nothing is lost.
const TempMaxAge = time.Hour

// CleanTemp removes the temporary files (".tmp-*") of writes that never
// finished (a process killed mid-Put or mid-PutClaim) whose modification time is older
// than maxAge (0: TempMaxAge), anywhere in the store, and returns how many
// it removed. Run it at start and from time to time (the indexer does,
// with its reconciler); it never touches a pack or a newer temporary file.
func (d *DirStore) CleanTemp(ctx context.Context, maxAge time.Duration) (int, error) {
	if maxAge <= 0 {
		maxAge = TempMaxAge
	}
	cutoff := time.Now().Add(-maxAge)
	removed := 0
	var walk func(dir string) error
	walk = func(dir string) error {
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
		for _, e := range ents {
			name := e.Name()
			switch {
			case e.IsDir() && (!strings.HasPrefix(name, ".") || dir == d.root && (name == proto.ClaimsDir || name == proto.SegmentsDir)):
				if err := walk(filepath.Join(dir, name)); err != nil {
					return err
				}
			case !e.IsDir() && strings.HasPrefix(name, tempPrefix):
				info, err := e.Info()
				if err != nil || !info.ModTime().Before(cutoff) {
					continue // gone meanwhile, or young: a write may be under way
				}
				if err := os.Remove(filepath.Join(dir, name)); err == nil {
					removed++
				} else if !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(d.root); err != nil {
		return removed, fmt.Errorf("removing stale temporary files in %s: %w", d.root, err)
	}
	return removed, nil
}
