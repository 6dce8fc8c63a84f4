package confirm

import (
	"math/rand/v2"
	"testing"
)

func TestPrefixComplete(t *testing.T) {
	tr := New(10)
	a := tr.Add(20)
	b := tr.Add(20) // a mid-transaction batch repeats the previous through
	c := tr.Add(30)
	if got, _ := tr.Ack(c); got != 10 {
		t.Fatalf("ack of the last message alone confirmed %d, want 10", got)
	}
	if got, _ := tr.Ack(a); got != 20 {
		t.Fatalf("confirmed %d, want 20", got)
	}
	if got, _ := tr.Ack(b); got != 30 {
		t.Fatalf("confirmed %d, want 30", got)
	}
	if tr.Pending() != 0 {
		t.Fatalf("pending %d", tr.Pending())
	}
	if _, err := tr.Ack(b); err == nil {
		t.Fatal("double ack accepted")
	}
}

// TestRandomOrder checks the invariant against a model under random ack
// orders, and that the scalar-max knob breaks it (negative control).
func TestRandomOrder(t *testing.T) {
	for _, scalar := range []bool{false, true} {
		violated := false
		for round := 0; round < 200; round++ {
			r := rand.New(rand.NewPCG(uint64(round), 7))
			tr := New(0)
			tr.SetScalarMaxForTest(scalar)
			var th []uint64
			var tks []Ticket
			lsn := uint64(0)
			for i := 0; i < 20; i++ {
				lsn += uint64(r.IntN(3))
				th = append(th, lsn)
				tks = append(tks, tr.Add(lsn))
			}
			acked := make([]bool, len(tks))
			for _, i := range r.Perm(len(tks)) {
				got, err := tr.Ack(tks[i])
				if err != nil {
					t.Fatal(err)
				}
				acked[i] = true
				// Model: the through of the longest acked prefix.
				want := uint64(0)
				for j := range acked {
					if !acked[j] {
						break
					}
					want = th[j]
				}
				if got != want {
					violated = true
					if !scalar {
						t.Fatalf("round %d: confirmed %d, model says %d", round, got, want)
					}
				}
			}
		}
		if scalar && !violated {
			t.Fatal("negative control: scalar-max never diverged from the prefix-complete model")
		}
	}
}
