package capture

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// Streamed transactions (protocol 2, docs/adr/0041-streamed-transactions.md).
//
// Postgres sends a transaction whose changes pass logical_decoding_work_mem
// in blocks before its commit. Its position (commit LSN, ordinal) is known
// only at Stream Commit, and the ordinals must be those protocol 1 gives
// (the changes of its aborted subtransactions left out), so nothing is
// built before the commit: each streamed message is appended, as protocol 1
// would send it, with its (sub)transaction's xid, to the transaction's
// spill file on local disk, through a small write buffer. Stream Abort of a
// subtransaction records its xid; of the transaction, deletes the file. At
// Stream Commit the file is replayed through the transaction path, as
// Begin(commit LSN) ... changes ... Commit, leaving out what aborted
// subtransactions sent. So every batch, claim, TOAST read, resync window
// and generated column is what protocol 1 gives, and memory stays bounded
// by the write buffer and one message.
//
// The files are a cache: Postgres resends every transaction not committed
// below the slot's confirmed LSN from its restart point, so a session
// starts by removing them all.

// spillBuffer is each open spill file's write buffer (and the replay's
// read buffer).
const spillBuffer = 64 << 10

// spillSuffix names the spill files in the spill directory; only files of
// this name are ever removed there.
const spillSuffix = ".pgoutput-spill"

// spill is one streamed transaction's file.
type spill struct {
	xid     uint32
	path    string
	f       *os.File
	w       *bufio.Writer
	size    int64               // bytes appended
	aborted map[uint32]struct{} // aborted subtransactions
}

// spills are a session's streamed transactions, by top-level xid.
type spills struct {
	dir   string
	open  map[uint32]*spill
	cur   *spill // the transaction of the block being received
	bytes int64  // on disk, every open file
	hdr   [8]byte
}

// spillName is the file of xid's spill.
func spillName(xid uint32) string { return fmt.Sprintf("xid-%d%s", xid, spillSuffix) }

// clearSpills removes every spill file in dir (a previous session's: the
// stream resends their transactions). A missing dir is empty.
func clearSpills(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: listing the spill directory %s: %w", ErrSpill, dir, err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), spillSuffix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%w: removing %s: %w", ErrSpill, e.Name(), err)
			}
		}
	}
	return nil
}

// start opens (or, on its first block, creates) xid's spill.
func (sp *spills) start(xid uint32, first bool) error {
	if x := sp.open[xid]; x != nil && !first {
		sp.cur = x
		return nil
	} else if x != nil {
		sp.remove(x) // a first block again: start over
	}
	if err := os.MkdirAll(sp.dir, 0o700); err != nil {
		return fmt.Errorf("%w: creating the spill directory %s: %w", ErrSpill, sp.dir, err)
	}
	p := filepath.Join(sp.dir, spillName(xid))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: creating %s: %w", ErrSpill, p, err)
	}
	x := &spill{xid: xid, path: p, f: f, w: bufio.NewWriterSize(f, spillBuffer), aborted: map[uint32]struct{}{}}
	if sp.open == nil {
		sp.open = map[uint32]*spill{}
	}
	sp.open[xid] = x
	sp.cur = x
	return nil
}

// append writes one streamed message of subtransaction xid (b as protocol 2
// sends it: the type byte, the xid, the body) to the block's spill, as
// protocol 1 sends it.
func (sp *spills) append(xid uint32, b []byte) error {
	x := sp.cur
	if x == nil {
		return fmt.Errorf("%w: a streamed %q message outside a stream block", ErrReplication, b[0])
	}
	n := len(b) - 4
	binary.BigEndian.PutUint32(sp.hdr[:4], uint32(n))
	binary.BigEndian.PutUint32(sp.hdr[4:], xid)
	if _, err := x.w.Write(sp.hdr[:]); err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrSpill, x.path, err)
	}
	if err := x.w.WriteByte(b[0]); err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrSpill, x.path, err)
	}
	if _, err := x.w.Write(b[5:]); err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrSpill, x.path, err)
	}
	x.size += int64(len(sp.hdr) + n)
	sp.bytes += int64(len(sp.hdr) + n)
	return nil
}

// remove closes and deletes x.
func (sp *spills) remove(x *spill) {
	_ = x.f.Close()
	_ = os.Remove(x.path)
	sp.bytes -= x.size
	delete(sp.open, x.xid)
	if sp.cur == x {
		sp.cur = nil
	}
}

// close removes every open spill (the session ends: the stream resends).
func (sp *spills) close() {
	for _, x := range sp.open {
		sp.remove(x)
	}
}

// streamed handles a protocol 2 stream message; ok is false for a message
// that is not one and arrives outside a stream block (the transaction
// path's).
func (s *session) streamed(ctx context.Context, data []byte) (ok bool, err error) {
	sp := &s.spills
	switch data[0] {
	case pgoutput.TypeStreamStart:
		m, err := pgoutput.DecodeStreamStart(data)
		if err != nil {
			return true, fmt.Errorf("%w: %w", ErrReplication, err)
		}
		s.inStream = true
		if m.FirstSegment || sp.open[m.Xid] == nil {
			s.o.Metrics.StreamedTxns.WithLabelValues("started").Inc()
		}
		if err := sp.start(m.Xid, m.FirstSegment); err != nil {
			return true, err
		}
		s.spillShown()
		return true, nil
	case pgoutput.TypeStreamStop:
		s.inStream = false
		sp.cur = nil
		s.spillShown()
		return true, nil
	case pgoutput.TypeStreamAbort:
		m, err := pgoutput.DecodeStreamAbort(data)
		if err != nil {
			return true, fmt.Errorf("%w: %w", ErrReplication, err)
		}
		x := sp.open[m.Xid]
		if x == nil {
			return true, nil // nothing of it was streamed in this session
		}
		if m.Subxid == m.Xid {
			sp.remove(x)
			s.o.Metrics.StreamedTxns.WithLabelValues("aborted").Inc()
		} else {
			x.aborted[m.Subxid] = struct{}{}
			s.o.Metrics.StreamedTxns.WithLabelValues("subxact_aborted").Inc()
		}
		s.spillShown()
		return true, nil
	case pgoutput.TypeStreamCommit:
		m, err := pgoutput.DecodeStreamCommit(data)
		if err != nil {
			return true, fmt.Errorf("%w: %w", ErrReplication, err)
		}
		return true, s.replay(ctx, m)
	}
	if !s.inStream {
		return false, nil
	}
	xid, has, err := pgoutput.StreamedXid(data)
	if err != nil {
		return true, fmt.Errorf("%w: %w", ErrReplication, err)
	}
	switch {
	case !has, data[0] == pgoutput.TypeType:
		// Origin and Type: protocol 1's path reads neither.
	case data[0] == pgoutput.TypeMessage:
		// Inside a stream only transactional messages, which the
		// transaction path ignores (the resync's marks are not).
	default:
		return true, sp.append(xid, data)
	}
	return true, nil
}

// replay runs a committed streamed transaction's spill through the
// transaction path.
func (s *session) replay(ctx context.Context, m pgoutput.StreamCommit) error {
	sp := &s.spills
	x := sp.open[m.Xid]
	if err := s.begin(ctx, pgoutput.Begin{FinalLSN: m.CommitLSN, CommitTime: m.CommitTime, Xid: m.Xid}); err != nil {
		return err
	}
	if x == nil {
		// Every block of a streamed transaction arrives in the session that
		// commits it (the stream resends it from the slot's restart point);
		// one whose changes are all of tables not published sends none.
		s.o.Log.Warn("a streamed transaction committed without a block in this session", "xid", m.Xid, "commit_lsn", proto.LSN(m.CommitLSN).String())
	} else {
		defer func() {
			sp.remove(x)
			s.spillShown()
		}()
		if err := s.replayFile(ctx, x); err != nil {
			return err
		}
		s.o.Metrics.StreamedTxns.WithLabelValues("committed").Inc()
	}
	return s.commit(ctx, pgoutput.Commit{Flags: m.Flags, CommitLSN: m.CommitLSN, EndLSN: m.EndLSN, CommitTime: m.CommitTime})
}

func (s *session) replayFile(ctx context.Context, x *spill) error {
	if err := x.w.Flush(); err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrSpill, x.path, err)
	}
	if _, err := x.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%w: reading %s: %w", ErrSpill, x.path, err)
	}
	r := bufio.NewReaderSize(x.f, spillBuffer)
	var hdr [8]byte
	var buf []byte
	nextStatus := time.Now().Add(s.o.StatusInterval)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("%w: reading %s: %w", ErrSpill, x.path, err)
		}
		n, xid := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("%w: reading %s: %w", ErrSpill, x.path, err)
		}
		// Everything an aborted subtransaction sent is left out, its
		// Relation messages too, as Postgres' own subscriber does (it
		// truncates its spool at the subtransaction's first message): a
		// Relation sent there can describe a DDL rolled back with it, and
		// after any Stream Abort pgoutput forgets the schemas it sent the
		// transaction and sends them again with its next change of each
		// table (pgoutput_stream_abort, cleanup_rel_sync_cache).
		if _, aborted := x.aborted[xid]; aborted && !s.o.ReplayAbortedForTest {
			continue
		}
		if err := s.handle(ctx, buf); err != nil {
			return err
		}
		if now := time.Now(); !now.Before(nextStatus) {
			// A long replay receives nothing: keep the server's timeout
			// (wal_sender_timeout) fed with the confirmed LSN, which the
			// batches published so far move (never past this transaction:
			// its commit is not acked).
			if err := s.pipe.Err(); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := s.status(); err != nil {
				return err
			}
			nextStatus = now.Add(s.o.StatusInterval)
		}
	}
}

// spillShown updates the spill's metrics and status.
func (s *session) spillShown() {
	sp := &s.spills
	s.o.Metrics.SpillBytes.Set(float64(sp.bytes))
	s.o.Metrics.SpillTxns.Set(float64(len(sp.open)))
	s.o.State.setSpill(sp.bytes, len(sp.open))
}

// protocolArgs are the pgoutput options of a session of protocol version
// proto (1 or 2).
func protocolArgs(version int, publication string) []string {
	// messages: the resync's watermarks (pg_logical_emit_message).
	args := []string{fmt.Sprintf("proto_version '%d'", version), "publication_names '" + publication + "'", "messages 'true'"}
	if version >= 2 {
		args = append(args, "streaming 'on'")
	}
	return args
}

// Protocol picks the pgoutput protocol version of a server of major version
// major: want (source.protocol: 0 for the default, 1 or 2), 2 by default
// from Postgres 14 on, which first streams in-progress transactions.
func Protocol(want, major int) (int, error) {
	switch {
	case want == 0 && major >= 14:
		return 2, nil
	case want == 0:
		return 1, nil
	case want == 2 && major < 14:
		return 0, fmt.Errorf("%w: source.protocol 2 needs Postgres 14 or later (the server is %d): set source.protocol: 1 or leave it out", source.ErrInvalidSource, major)
	case want == 1 || want == 2:
		return want, nil
	}
	return 0, fmt.Errorf("%w: source.protocol %d: want 1 or 2", source.ErrInvalidSource, want)
}
