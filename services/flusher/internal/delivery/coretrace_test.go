package delivery

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/services/flusher/internal/model"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// The production flusher's core log, recorded over a flush, a graceful
// hand-over and a takeover's settle, replays against the protocol: every
// step is one the model allows. The same log edited to ack before the
// cursor write is refused (the negative control).
func TestCoreTraceConforms(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(CoreTraceEnv, dir)
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.FlushInterval = 200 * time.Millisecond })
	a := e.start(t, "a", nil)
	e.publish(t, "d1", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	e.publish(t, "d2", []pt.Row{{ID: 2, LSN: 11, Seq: 1}})
	e.publish(t, "d1", []pt.Row{{ID: 3, LSN: 12, Seq: 1}})
	waitFor(t, 10*time.Second, "a flushed", func() bool {
		return e.cursor(t, "d1") == (proto.Position{LSN: 12, Seq: 1}) && e.cursor(t, "d2") == (proto.Position{LSN: 11, Seq: 1})
	})
	a.stop()
	b := e.start(t, "b", nil)
	e.publish(t, "d1", []pt.Row{{ID: 4, LSN: 20, Seq: 1}})
	waitFor(t, 10*time.Second, "b flushed", func() bool { return e.cursor(t, "d1") == (proto.Position{LSN: 20, Seq: 1}) })
	b.stop()

	var logA []byte
	for _, id := range []string{"a", "b"} {
		data, err := os.ReadFile(filepath.Join(dir, id+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := model.Conform(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s's log does not conform: %v", id, err)
		}
		if !bytes.Contains(data, []byte(`"ev":"commit"`)) || n < 10 {
			t.Fatalf("%s's log has %d records and no commit", id, n)
		}
		if id == "a" {
			logA = data
		}
	}

	edited := ackBeforeCursor(t, logA)
	if _, err := model.Conform(bytes.NewReader(edited)); err == nil || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("a log edited to ack before the cursor write conforms (err %v)", err)
	}
}

// ackBeforeCursor moves the first successful commit of log to just before
// its flush's cursor step.
func ackBeforeCursor(t *testing.T, log []byte) []byte {
	lines := strings.Split(strings.TrimSuffix(string(log), "\n"), "\n")
	recs := make([]core.Record, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range recs {
		if r.Ev != core.EvCommit || !strings.HasPrefix(r.Out, "ack") {
			continue
		}
		for j := i - 1; j >= 0; j-- {
			q := recs[j]
			if q.Ev == core.EvTarget && q.Dest == r.Dest && q.Part == r.Part && q.Term == r.Term {
				moved := append([]string{}, lines[:j]...)
				moved = append(moved, lines[i])
				moved = append(moved, lines[j:i]...)
				moved = append(moved, lines[i+1:]...)
				return []byte(strings.Join(moved, "\n") + "\n")
			}
		}
	}
	t.Fatal("no commit after a cursor step in the log")
	return nil
}
