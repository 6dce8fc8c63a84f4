package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"strings"
	"time"
)

// Result is one exploration.
type Result struct {
	States    int           // distinct states
	Depth     int           // BFS depth reached (longest shortest path)
	Elapsed   time.Duration // wall time
	Violation string        // the first rule broken, "" if none
	Trace     []string      // the shortest trace to it, as readable steps
	Truncated bool          // MaxStates reached before the end
}

var seed = maphash.MakeSeed()

// encode is the canonical encoding of s under replica permutation perm
// (perm[i] is the replica written i-th).
func encode(b []byte, s *state, perm []int) []byte {
	inv := make([]int8, len(perm))
	for i, r := range perm {
		inv[r] = int8(i)
	}
	mapH := func(h int8) byte {
		if h >= 0 {
			return byte(inv[h])
		}
		return byte(h)
	}
	for _, m := range s.msgs {
		b = append(b, m.change, m.status, m.deliv, mapH(m.holder))
	}
	b = append(b, 0xff, s.published, byte(s.durable), byte(s.durable>>8), byte(s.events), byte(s.events>>8), mapH(s.holder), s.crashes, s.expiries, s.failures)
	if s.live {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(s.term))
	for _, c := range s.cursor {
		b = binary.AppendUvarint(b, uint64(c.LSN))
		b = binary.AppendUvarint(b, c.Seq)
	}
	for _, r := range perm {
		p := s.reps[r].p
		b = binary.AppendUvarint(b, uint64(s.reps[r].req))
		if p == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = p.AppendState(b, encItem)
	}
	return b
}

// perms are every permutation of n replicas (n <= 3 in practice).
func perms(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, q := range perms(n - 1) {
		for i := 0; i <= len(q); i++ {
			p := append(append(append([]int{}, q[:i]...), n-1), q[i:]...)
			out = append(out, p)
		}
	}
	return out
}

// hasher computes the symmetry-reduced hash of a state: the hash of the
// smallest encoding over every permutation of the replicas.
type hasher struct {
	perms    [][]int
	buf, min []byte
}

func (h *hasher) hash(s *state) uint64 {
	h.min = h.min[:0]
	for i, p := range h.perms {
		h.buf = encode(h.buf[:0], s, p)
		if i == 0 || bytes.Compare(h.buf, h.min) < 0 {
			h.min = append(h.min[:0], h.buf...)
		}
	}
	return maphash.Bytes(seed, h.min)
}

type node struct {
	parent uint64
	act    action
}

type queued struct {
	s *state
	h uint64
}

// Check explores every interleaving of c breadth first.
func Check(c Config) Result {
	start := time.Now()
	hs := &hasher{perms: perms(c.Replicas)}
	init := initial(c)
	h0 := hs.hash(init)
	seen := map[uint64]node{h0: {parent: h0}}
	frontier := []queued{{init, h0}}
	var acts []action
	res := Result{}
	for depth := 0; len(frontier) > 0; depth++ {
		res.Depth = depth
		if c.Progress != nil {
			c.Progress(depth, len(seen), len(frontier))
		}
		var next []queued
		for _, q := range frontier {
			acts = enabled(c, q.s, acts)
			for _, a := range acts {
				t := q.s.clone(a)
				v := apply(c, t, a, nil)
				if v == "" {
					v = checkState(c, t)
				}
				if v != "" {
					res.Violation = v
					res.Trace = trace(c, seen, h0, q.h, a)
					res.Depth = depth + 1
					res.States = len(seen)
					res.Elapsed = time.Since(start)
					return res
				}
				h := hs.hash(t)
				if _, ok := seen[h]; ok {
					continue
				}
				seen[h] = node{parent: q.h, act: a}
				next = append(next, queued{t, h})
				if c.MaxStates > 0 && len(seen) >= c.MaxStates {
					res.Truncated = true
					res.States = len(seen)
					res.Elapsed = time.Since(start)
					return res
				}
			}
		}
		frontier = next
	}
	res.States = len(seen)
	res.Elapsed = time.Since(start)
	return res
}

// trace replays the shortest path to the state hashed h, then last, as
// readable steps.
func trace(c Config, seen map[uint64]node, h0, h uint64, last action) []string {
	var path []action
	for h != h0 {
		n := seen[h]
		path = append(path, n.act)
		h = n.parent
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	path = append(path, last)
	s := initial(c)
	var out []string
	for i, a := range path {
		var notes []string
		v := apply(c, s, a, func(n string) { notes = append(notes, n) })
		if v == "" {
			v = checkState(c, s)
		}
		line := fmt.Sprintf("%2d. %s", i+1, strings.Join(notes, "; "))
		if v != "" {
			line += "\n    VIOLATION: " + v
		}
		out = append(out, line)
	}
	out = append(out, "    state: "+s.describe(c))
	return out
}

// CheckDepthFirst explores c depth first: the same states and checks as
// Check, in memory for the visited hashes and one path only (the large
// configuration's frontier would not fit in memory breadth first). Depth is
// the longest path it walked, and a violation's trace is the path that
// reached it, not the shortest.
func CheckDepthFirst(c Config) Result {
	start := time.Now()
	hs := &hasher{perms: perms(c.Replicas)}
	init := initial(c)
	seen := map[uint64]struct{}{hs.hash(init): {}}
	type frame struct {
		s    *state
		acts []action
		next int
		via  action
	}
	stack := []frame{{s: init, acts: enabled(c, init, nil)}}
	res := Result{}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == len(top.acts) {
			stack = stack[:len(stack)-1]
			continue
		}
		a := top.acts[top.next]
		top.next++
		t := top.s.clone(a)
		v := apply(c, t, a, nil)
		if v == "" {
			v = checkState(c, t)
		}
		if v != "" {
			res.Violation = v
			s := initial(c)
			path := make([]action, 0, len(stack))
			for _, f := range stack[1:] {
				path = append(path, f.via)
			}
			path = append(path, a)
			for i, pa := range path {
				var notes []string
				apply(c, s, pa, func(n string) { notes = append(notes, n) })
				res.Trace = append(res.Trace, fmt.Sprintf("%2d. %s", i+1, strings.Join(notes, "; ")))
			}
			res.Trace = append(res.Trace, "    VIOLATION: "+v, "    state: "+s.describe(c))
			break
		}
		h := hs.hash(t)
		if _, ok := seen[h]; ok {
			continue
		}
		seen[h] = struct{}{}
		if c.MaxStates > 0 && len(seen) >= c.MaxStates {
			res.Truncated = true
			break
		}
		if c.Progress != nil && len(seen)%1_000_000 == 0 {
			c.Progress(len(stack), len(seen), 0)
		}
		stack = append(stack, frame{s: t, acts: enabled(c, t, nil), via: a})
		res.Depth = max(res.Depth, len(stack)-1)
	}
	res.States = len(seen)
	res.Elapsed = time.Since(start)
	return res
}
