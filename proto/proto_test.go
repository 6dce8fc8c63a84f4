package proto

import (
	"errors"
	"strings"
	"testing"
	"testing/quick"

	"github.com/apache/arrow-go/v18/arrow"
)

func TestLSNRoundTrip(t *testing.T) {
	for _, s := range []string{"0/0", "0/16B3748", "1/0", "FFFFFFFF/FFFFFFFF"} {
		l, err := ParseLSN(s)
		if err != nil {
			t.Fatalf("ParseLSN(%q): %v", s, err)
		}
		if got := l.String(); got != s {
			t.Errorf("LSN %q round-tripped to %q", s, got)
		}
	}
	for _, s := range []string{"", "16B3748", "x/1", "1/", "/1", "100000000/0"} {
		if _, err := ParseLSN(s); err == nil {
			t.Errorf("ParseLSN(%q) accepted", s)
		}
	}
}

func TestPositionOrder(t *testing.T) {
	a := Position{LSN: 10, Seq: 5}
	b := Position{LSN: 10, Seq: 6}
	c := Position{LSN: 11, Seq: 1}
	if !a.Less(b) || !b.Less(c) || c.Less(a) || a.Compare(a) != 0 {
		t.Fatal("positions are not ordered by (lsn, seq)")
	}
	if !c.Less(Through(11)) || Through(11).Less(c) {
		t.Fatal("Through(lsn) must sort after every change committed at lsn")
	}
	p, err := ParsePosition(b.String())
	if err != nil || p != b {
		t.Fatalf("ParsePosition(%q) = %v, %v", b.String(), p, err)
	}
	p, err = ParsePosition("0/B")
	if err != nil || p != Through(11) {
		t.Fatalf("a bare LSN must parse as Through: %v %v", p, err)
	}
}

func TestDestinationNames(t *testing.T) {
	cases := map[string]string{
		"shop0":                                "shop0",
		"42":                                   "42",
		"8c1f2d1e-7b1a-4c6e-9a55-0c1f2d1e7b1a": "8c1f2d1e-7b1a-4c6e-9a55-0c1f2d1e7b1a",
	}
	for v, want := range cases {
		got, err := DestinationName(v)
		if err != nil || got != want {
			t.Errorf("DestinationName(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	for _, v := range []string{"a.b", "", "a b", "../etc", "x*>", "Ünïcode", "'; DROP TABLE x; --", strings.Repeat("z", 65)} {
		name, err := DestinationName(v)
		if err != nil {
			t.Fatalf("DestinationName(%q): %v", v, err)
		}
		if !strings.HasPrefix(name, "~") {
			t.Errorf("value %q needs the encoding, got %q", v, name)
		}
		if err := ValidateDestination(name); err != nil {
			t.Errorf("encoded name %q does not validate: %v", name, err)
		}
		back, err := DecodeDestination(name)
		if err != nil || back != v {
			t.Errorf("DecodeDestination(%q) = %q, %v; want %q", name, back, err, v)
		}
	}
	if _, err := DestinationName(strings.Repeat("é", 200)); !errors.Is(err, ErrUnroutable) {
		t.Errorf("an over-long value must be unroutable, got %v", err)
	}
	for _, bad := range []string{"", "a.b", "a/b", "~", "~ZZ", "~!!", "a*", ">", "~c4n64 "} {
		if bad == "~" {
			continue // the empty string's encoding is valid
		}
		if err := ValidateDestination(bad); err == nil {
			t.Errorf("ValidateDestination(%q) accepted", bad)
		}
	}
}

// Every routing value maps to a name that validates and decodes back to it,
// and no two values share a name.
func TestDestinationNamesProperty(t *testing.T) {
	f := func(a, b string) bool {
		na, ea := DestinationName(a)
		nb, eb := DestinationName(b)
		if ea != nil || eb != nil {
			return errors.Is(ea, ErrUnroutable) || errors.Is(eb, ErrUnroutable)
		}
		if ValidateDestination(na) != nil {
			return false
		}
		if back, err := DecodeDestination(na); err != nil || back != a {
			return false
		}
		return (a == b) == (na == nb)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

func TestPartitionStable(t *testing.T) {
	if Partition("shop0", 16) != Partition("shop0", 16) {
		t.Fatal("partition is not stable")
	}
	seen := map[int]bool{}
	for i := 0; i < 1000; i++ {
		p := Partition(strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('0'+i%10)), 16)
		if p < 0 || p >= 16 {
			t.Fatalf("partition %d out of range", p)
		}
		seen[p] = true
	}
	if len(seen) < 12 {
		t.Fatalf("partitions are badly spread: %d of 16 used", len(seen))
	}
}

func TestSubjects(t *testing.T) {
	if tb, ok := TableFromChangesSubject(ChangesSubject("public.orders")); !ok || tb != "public.orders" {
		t.Fatal("changes subject does not round-trip")
	}
	if _, ok := TableFromChangesSubject(SubjectTick); ok {
		t.Fatal("the tick subject must never parse as a table")
	}
	if r, ok := ReplaySubject(ChangesSubject("public.orders")); !ok || r != "sluice.replay.changes.public.orders" || !strings.HasPrefix(r, strings.TrimSuffix(SubjectReplayAll, ">")) {
		t.Fatalf("replay subject: %q %v", r, ok)
	}
	if r, ok := ReplaySubject(RoutedSubject(1, "a")); ok {
		t.Fatalf("a ROUTED subject has no replay subject, got %q", r)
	}
	p, d, err := ParseRoutedSubject(RoutedSubject(7, "~c4n64"))
	if err != nil || p != 7 || d != "~c4n64" {
		t.Fatalf("routed subject: %d %q %v", p, d, err)
	}
	for _, bad := range []string{"sluice.routed.x.a", "sluice.routed.1", "sluice.routed.1.a.b", "other.1.a"} {
		if _, _, err := ParseRoutedSubject(bad); err == nil {
			t.Errorf("ParseRoutedSubject(%q) accepted", bad)
		}
	}
}

func TestCheckWire(t *testing.T) {
	if err := CheckWire(WireVersion); err != nil {
		t.Fatal(err)
	}
	if err := CheckWire("1.7"); err != nil {
		t.Fatal("a newer minor must be accepted:", err)
	}
	for _, v := range []string{"2.0", "0.9", "", "1", "x.y"} {
		if err := CheckWire(v); !errors.Is(err, ErrWireVersion) {
			t.Errorf("CheckWire(%q) = %v, want ErrWireVersion", v, err)
		}
	}
}

func TestKinds(t *testing.T) {
	for _, k := range []Kind{KindInt16, KindInt32, KindInt64, KindNumeric, KindFloat32, KindFloat64, KindBool, KindText,
		KindUUID, KindTimestampTZ, KindTimestamp, KindDate, KindTime, KindInterval, KindJSON, KindJSONB, KindToJSONB, KindBytea, KindEnum, KindOther} {
		if _, err := k.ArrowType(); err != nil {
			t.Errorf("kind %s: %v", k, err)
		}
		if _, err := ArrayKind(k).ArrowType(); err != nil {
			t.Errorf("array of %s: %v", k, err)
		}
	}
	if _, err := Kind("bogus").ArrowType(); err == nil {
		t.Error("an unknown kind must be refused")
	}
}

func TestValidateTable(t *testing.T) {
	for _, ok := range []string{"public.orders", "s1.t_2"} {
		if err := ValidateTable(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"orders", "public.Orders", "a.b.c", "public.ord-ers", "public.\"x\"", "public.*", ""} {
		if err := ValidateTable(bad); err == nil {
			t.Errorf("ValidateTable(%q) accepted", bad)
		}
	}
}

// TestPrimaryKeyTravelsAsAList: a key whose quoted column names hold a
// comma and edge spaces comes back whole from the schema metadata
// (MetaKey, a list); the comma-joined MetaPrimaryKey, read alone as
// before, splits it wrongly (the control), and is read only when MetaKey
// is absent.
func TestPrimaryKeyTravelsAsAList(t *testing.T) {
	key := []string{"tenant_id", "a,b", " x "}
	md := SchemaMetadata("public.t", key, "tenant_id")
	got, err := PrimaryKey(md)
	if err != nil || strings.Join(got, "|") != "tenant_id|a,b| x " {
		t.Fatalf("PrimaryKey = %q, %v; want %q", got, err, key)
	}
	if v, _ := md.GetValue(MetaPrimaryKey); len(strings.Split(v, ",")) == len(key) {
		t.Fatalf("control: the comma-joined form %q splits back into the key; the test proves nothing", v)
	}
	legacy := arrow.NewMetadata([]string{MetaTable, MetaPrimaryKey}, []string{"public.t", "tenant_id,id"})
	if got, err := PrimaryKey(legacy); err != nil || strings.Join(got, "|") != "tenant_id|id" {
		t.Fatalf("legacy key = %q, %v", got, err)
	}
	if got, err := PrimaryKey(arrow.NewMetadata(nil, nil)); err != nil || got != nil {
		t.Fatalf("no key = %q, %v", got, err)
	}
	bad := arrow.NewMetadata([]string{MetaKey}, []string{"tenant_id,id"})
	if _, err := PrimaryKey(bad); err == nil {
		t.Fatal("a MetaKey that is no JSON list was accepted")
	}
}
