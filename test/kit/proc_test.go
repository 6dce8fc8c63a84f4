package kit

import "testing"

// TestFreePortUnique: FreePort never returns a port twice, though none of
// them is listened on yet (a pipeline allocates every port before it
// starts a process).
func TestFreePortUnique(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
