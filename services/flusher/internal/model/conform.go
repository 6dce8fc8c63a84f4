package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
)

// ritem is a replayed message.
type ritem core.Msg

func (it ritem) Msg() core.Msg { return core.Msg(it) }

// Conform replays a core log (JSON lines of core.Record, as the flusher
// writes them with SLUICE_FLUSHER_CORE_TRACE) against fresh cores with
// every rule on, and reports how many records it checked. Every record's
// event must be one the protocol accepts in the replayed state and its
// answer the one the protocol gives: a log from a run with a rule off, or
// edited to ack before the cursor write, is refused. A last line cut short
// (the process was killed mid-write) ends the log.
func Conform(r io.Reader) (int, error) {
	type key struct {
		part int
		term int64
	}
	parts := map[key]*core.Partition[ritem]{}
	var got core.Record
	var have bool
	capture := func(r core.Record) { got, have = r, true }
	dec := json.NewDecoder(r)
	n := 0
	for {
		var rec core.Record
		err := dec.Decode(&rec)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("reading record %d: %w", n+1, err)
		}
		n++
		k := key{rec.Part, rec.Term}
		if rec.Ev == core.EvClaim {
			if rec.Mutant != 0 {
				return n, fmt.Errorf("record %d: partition %d term %d was run with mutant switches %#x", n, rec.Part, rec.Term, rec.Mutant)
			}
			p := core.NewPartition[ritem](rec.Part, rec.Term, rec.Loaded, 0)
			p.SetRecorder(capture)
			parts[k] = p
			continue
		}
		p := parts[k]
		if p == nil {
			return n, fmt.Errorf("record %d: partition %d term %d was never claimed", n, rec.Part, rec.Term)
		}
		have = false
		if err := replay(p, rec); err != nil {
			return n, fmt.Errorf("record %d (%s %s): %w", n, rec.Ev, rec.Dest, err)
		}
		if !have || got.Ev != rec.Ev || got.Out != rec.Out {
			return n, fmt.Errorf("record %d (%s %s, partition %d term %d): the protocol answers %q, the log says %q", n, rec.Ev, rec.Dest, rec.Part, rec.Term, got.Out, rec.Out)
		}
	}
}

var errNoFlush = errors.New("no flush in flight")

func replay(p *core.Partition[ritem], rec core.Record) error {
	var d *core.Dest[ritem]
	var f *core.Flush[ritem]
	if rec.Dest != "" && rec.Ev != core.EvForget {
		d = p.Dest(rec.Dest)
		f = d.Inflight()
	}
	needFlush := func() error {
		if f == nil {
			return errNoFlush
		}
		return nil
	}
	needMsg := func() error {
		if rec.Msg == nil {
			return errors.New("record without its message")
		}
		return nil
	}
	switch rec.Ev {
	case core.EvReceive:
		if err := needMsg(); err != nil {
			return err
		}
		// The lifecycle hook's answer is the shell's (its states are not
		// the protocol's); the rest of the answer is the core's.
		hv := core.Buffer
		for _, v := range []core.Verdict{core.Retired, core.NakHeld} {
			if verdict, _, _ := strings.Cut(rec.Out, ";"); verdict == v.String() {
				hv = v
			}
		}
		d.Receive(ritem(*rec.Msg), rec.Gen, func() core.Verdict { return hv })
	case core.EvStart:
		d.StartFlush()
	case core.EvDone:
		if err := needFlush(); err != nil {
			return err
		}
		_ = f.Done(rec.Step)
	case core.EvTarget:
		if err := needFlush(); err != nil {
			return err
		}
		d.CursorTarget(f)
	case core.EvWritten:
		if err := needFlush(); err != nil {
			return err
		}
		if rec.Pos == nil {
			return errors.New("record without its position")
		}
		_ = d.CursorWritten(f, *rec.Pos)
	case core.EvCommit:
		if err := needFlush(); err != nil {
			return err
		}
		_, _, _ = d.Commit(f, rec.Flag)
	case core.EvFail:
		if err := needFlush(); err != nil {
			return err
		}
		d.Fail(f, rec.Flag, rec.Lost)
	case core.EvSettle:
		p.Settle(rec.N)
	case core.EvLose:
		p.Lose()
	case core.EvForget:
		p.Forget(rec.Dest)
	case core.EvLoad:
		p.Load(rec.Loaded)
	case core.EvEvict:
		d.EvictLive()
	case core.EvResume:
		d.Resume()
	case core.EvExpire:
		p.Expire()
	case core.EvRenewed:
		p.Renewed()
	case core.EvDrained:
		p.Drained()
	default:
		return fmt.Errorf("unknown event %q", rec.Ev)
	}
	return nil
}
