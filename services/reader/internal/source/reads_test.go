package source

import "testing"

func TestXidVisible(t *testing.T) {
	for _, c := range []struct {
		snap string
		xid  uint32
		want bool
	}{
		{"100:105:", 99, true},
		{"100:105:", 104, true},
		{"100:105:", 105, false}, // not completed when the snapshot was taken
		{"100:105:", 107, false},
		{"100:105:100,103", 103, false}, // in progress
		{"100:105:100,103", 102, true},
		{"4294967390:4294967400:4294967395", 4294967395 & 0xffffffff, false}, // epoch 1
		{"4294967390:4294967400:4294967395", 4294967391 & 0xffffffff, true},
		{"4294967290:4294967300:", 4294967295, true}, // the previous epoch's last xid
		{"4294967290:4294967300:", 4, false},         // this epoch's xid 4 (4294967300) is xmax
	} {
		got, err := XidVisible(c.snap, c.xid)
		if err != nil || got != c.want {
			t.Errorf("XidVisible(%q, %d) = %v, %v; want %v", c.snap, c.xid, got, err, c.want)
		}
	}
	if _, err := XidVisible("garbage", 1); err == nil {
		t.Error("a malformed snapshot was accepted")
	}
}
