package core

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
)

// Record is one entry of a core's log: an event and the core's answer to
// it. A log replays (model.Conform) against a fresh core, which must give
// the same answers: the recorded run made only transitions the protocol
// allows.
type Record struct {
	Part   int                       `json:"part"`
	Term   int64                     `json:"term"`
	Ev     string                    `json:"ev"`
	Dest   string                    `json:"dest,omitempty"`
	Msg    *Msg                      `json:"msg,omitempty"`
	Gen    uint64                    `json:"gen,omitempty"`
	Step   Step                      `json:"step,omitempty"`
	Pos    *proto.Position           `json:"pos,omitempty"`
	Flag   bool                      `json:"flag,omitempty"` // commit: lease live; fail: permanent
	Lost   bool                      `json:"lost,omitempty"` // fail: partition lost
	N      int                       `json:"n,omitempty"`    // settle: ack-pending count
	Loaded map[string]proto.Position `json:"loaded,omitempty"`
	Mutant Mutant                    `json:"mutant,omitempty"`
	Out    string                    `json:"out"`
}

// Events of a Record.
const (
	EvClaim   = "claim"
	EvReceive = "receive"
	EvStart   = "start"
	EvDone    = "done"
	EvTarget  = "target"
	EvWritten = "written"
	EvCommit  = "commit"
	EvFail    = "fail"
	EvSettle  = "settle"
	EvLose    = "lose"
	EvEvict   = "evict"
	EvForget  = "forget"
	EvLoad    = "load"
	EvResume  = "resume"
	EvExpire  = "expire"
	EvRenewed = "renewed"
	EvDrained = "drained"
)

// SetRecorder makes p log every event and answer to rec (nil: none),
// starting with its claim. rec is called synchronously, under the shell's
// lock.
func (p *Partition[T]) SetRecorder(rec func(Record)) {
	p.rec = rec
	p.record(Record{Ev: EvClaim, Loaded: p.loaded, Mutant: p.mut})
}

func (p *Partition[T]) record(r Record) {
	if p.rec == nil {
		return
	}
	r.Part, r.Term = p.ID, p.term
	p.rec(r)
}

func seqs[T Item](its []T) string {
	var b strings.Builder
	for i, it := range its {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, it.Msg().Seq)
	}
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var verdictNames = [...]string{"buffer", "release", "nak-halted", "nak-epoch", "ack-drop", "retired", "nak-expired", "nak-held"}

func (v Verdict) String() string { return verdictNames[v] }
