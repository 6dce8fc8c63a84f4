//go:build !linux

package packstore

import "errors"

// syncfsReliable is false off Linux: PutMany fsyncs every file and
// directory.
var syncfsReliable = false

func (d *DirStore) syncfs() error { return errors.New("syncfs is Linux only") }
