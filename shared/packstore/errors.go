package packstore

import "errors"

var (
	// ErrNotFound is returned by Get for a path that holds no pack.
	ErrNotFound = errors.New("pack not found")
	// ErrImmutable is returned by Put when the path already holds different
	// bytes: packs are never overwritten.
	ErrImmutable = errors.New("pack already exists with different content")
	// ErrBadPath marks a path outside the <destination>/<table>/<file> layout.
	ErrBadPath = errors.New("invalid pack path")
	// ErrCorruptPack marks bytes that are not a readable sluice pack. It is
	// permanent: retrying cannot help.
	ErrCorruptPack = errors.New("corrupt pack")
	// ErrBadPackMeta marks a PackMeta that is incomplete or disagrees with the
	// rows it describes.
	ErrBadPackMeta = errors.New("invalid pack metadata")
)
