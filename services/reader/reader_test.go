package reader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

const schemaSQL = `CREATE TABLE public.items (tenant_id text NOT NULL, id bigint NOT NULL, v text, n numeric, PRIMARY KEY (tenant_id, id));`

func TestStreamInsertUpdateDeleteMove(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL)
	run := e.start(e.newReader("a", nil))
	eventually(t, 20*time.Second, func() error {
		if run.r.Status().State != "streaming" {
			return fmt.Errorf("state %s", run.r.Status().State)
		}
		return nil
	})
	e.exec(`INSERT INTO items VALUES ('t1', 1, 'a', 1.5), ('t1', 2, 'b', NULL), ('t2', 3, 'c', 3);
		UPDATE items SET v = 'a2' WHERE id = 1;
		UPDATE items SET tenant_id = 't9' WHERE id = 2;
		DELETE FROM items WHERE id = 3;`)
	var rows []row
	eventually(t, 20*time.Second, func() error {
		rows, _, _ = e.changes()
		if len(rows) < 7 {
			return fmt.Errorf("%d rows", len(rows))
		}
		return nil
	})
	for _, r := range rows {
		t.Log(r)
	}
	want := []struct {
		op     int8
		tenant string
		id     int64
	}{{proto.OpInsert, "t1", 1}, {proto.OpInsert, "t1", 2}, {proto.OpInsert, "t2", 3},
		{proto.OpUpdate, "t1", 1}, {proto.OpMoveOut, "t1", 2}, {proto.OpUpdate, "t9", 2}, {proto.OpDelete, "t2", 3}}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.op != w.op || r.vals["tenant_id"] != w.tenant || r.vals["id"] != w.id {
			t.Errorf("row %d = %v, want op %d %s/%d", i, r, w.op, w.tenant, w.id)
		}
	}
	// One transaction: one commit LSN, seqs from 1; the move's two rows share
	// a position.
	for i := range rows {
		if rows[i].pos.LSN != rows[0].pos.LSN {
			t.Errorf("row %d at %s, not in the transaction's commit LSN %s", i, rows[i].pos, rows[0].pos.LSN)
		}
	}
	if rows[4].pos != rows[5].pos || rows[4].pos.Seq != 5 {
		t.Errorf("move out %s and update %s must share position seq 5", rows[4].pos, rows[5].pos)
	}
	if rows[4].vals["v"] != nil {
		t.Errorf("move-out carries non-key value %v", rows[4].vals["v"])
	}
	if rows[0].vals["n"] != "1.5" {
		t.Errorf("numeric = %#v", rows[0].vals["n"])
	}
	// The confirmed LSN reaches the commit once acked.
	eventually(t, 10*time.Second, func() error {
		c, _ := proto.ParseLSN(run.r.Status().ConfirmedLSN)
		if c <= rows[0].pos.LSN {
			return fmt.Errorf("confirmed %s, commit %s", c, rows[0].pos.LSN)
		}
		return nil
	})
	_, _, msgs := e.changes()
	traces := map[string]bool{}
	for _, m := range msgs {
		if m.Subject == proto.SubjectTick {
			continue
		}
		tp := m.Header.Get(proto.HeaderTraceparent)
		if len(tp) != 55 || traces[tp] {
			t.Errorf("message %s: traceparent %q (each batch is the root of its own trace)", m.Header.Get(proto.HeaderMsgID), tp)
		}
		traces[tp] = true
		for _, h := range []string{proto.HeaderWire, proto.HeaderTable, proto.HeaderSchema, proto.HeaderFirst, proto.HeaderLast, proto.HeaderThrough, proto.HeaderRows, proto.HeaderMsgID} {
			if m.Header.Get(h) == "" {
				t.Errorf("message lacks header %s", h)
			}
		}
	}
	// Acks resolve concurrently: a tick acked after the batch can confirm
	// its LSN a moment before the batch's own callback counts its rows.
	eventually(t, 10*time.Second, func() error {
		if st := run.r.Status(); st.Rows["public.items"] != 7 {
			return fmt.Errorf("status rows %v", st.Rows)
		}
		return nil
	})
	if !strings.HasPrefix(rows[0].msgID, "c:public.items:") {
		t.Errorf("msg id %s", rows[0].msgID)
	}
}
