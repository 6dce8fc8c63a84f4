package kit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

// FaultProxy is a TCP proxy between NATS clients and a nats-server that can
// lose a client's publish on purpose: it drops one whole PUB or HPUB frame
// of the client->server stream, so the broker never stores that message
// while the later ones on the same connection are stored and acked. That
// is the one fault rule 2 (the reader's prefix-complete confirmed LSN) is
// about, and the real broker cannot produce it on demand: a restart fails
// every in-flight publish, not one in the middle. It is the kit's only
// fake, and it fakes nothing but the loss: every byte it forwards is the
// client's and the server's own.
//
// The client->server stream is parsed just enough to find frame
// boundaries: CONNECT, PING, PONG, SUB, UNSUB and anything else it does
// not know pass through as lines; PUB and HPUB pass through with their
// payload unless a drop rule selects them. The server->client stream
// (INFO, MSG, HMSG, +OK, -ERR, PING, PONG) is copied untouched.
type FaultProxy struct {
	target string
	ln     net.Listener

	mu        sync.Mutex
	conns     map[int]net.Conn // live client and server sides, to close on Close
	nextConn  int
	once      []dropOnce // armed one-shot drops, first match wins
	watches   []dropOnce // armed one-shot notifications of a forwarded frame
	rate      *dropRate
	dropped   []Frame // kept, up to maxKeptFrames
	drops     int
	forwarded map[string]int // forwarded PUB/HPUB frames by subject
	accepted  int

	wg     sync.WaitGroup
	closed chan struct{}
}

// Frame is one client publish the proxy saw.
type Frame struct {
	Conn    int    // proxy connection number, from 1
	Subject string // PUB/HPUB subject
	Reply   string
	Size    int // payload bytes (headers included)
	// Header holds the HPUB header block's fields (nil for PUB): the
	// sluice headers (Sluice-Rows, Sluice-Through, …) and Nats-Msg-Id.
	Header map[string]string
	At     time.Time
}

// MsgID is the frame's Nats-Msg-Id ("" when it has none).
func (f Frame) MsgID() string { return f.Header[proto.HeaderMsgID] }

// Rows is the frame's Sluice-Rows header as a number (0 when absent).
func (f Frame) Rows() int {
	n, _ := strconv.Atoi(f.Header[proto.HeaderRows])
	return n
}

func (f Frame) String() string {
	return fmt.Sprintf("conn %d %s id=%s rows=%s first=%s last=%s through=%s (%d bytes)", f.Conn, f.Subject, f.MsgID(),
		f.Header[proto.HeaderRows], f.Header[proto.HeaderFirst], f.Header[proto.HeaderLast], f.Header[proto.HeaderThrough], f.Size)
}

// Selector picks the frames a drop rule applies to.
type Selector func(Frame) bool

// SubjectMatches selects frames whose subject matches a NATS subject
// pattern (tokens separated by '.', '*' one token, a final '>' the rest).
func SubjectMatches(pattern string) Selector {
	return func(f Frame) bool { return subjectMatch(pattern, f.Subject) }
}

// ChangesData selects the reader's data messages on CHANGES (every
// sluice.changes.> subject but the idle tick's): losing one loses rows.
func ChangesData(f Frame) bool {
	return subjectMatch(proto.SubjectChangesAll, f.Subject) && f.Subject != proto.SubjectTick
}

// Covers selects the data messages whose position range (Sluice-First ..
// Sluice-Last) holds pos, e.g. a resend of a dropped batch.
func Covers(pos proto.Position) Selector {
	return func(f Frame) bool {
		first, err1 := proto.ParsePosition(f.Header[proto.HeaderFirst])
		last, err2 := proto.ParsePosition(f.Header[proto.HeaderLast])
		return err1 == nil && err2 == nil && ChangesData(f) && first.Compare(pos) <= 0 && pos.Compare(last) <= 0
	}
}

type dropOnce struct {
	sel  Selector
	done chan Frame // buffered 1; receives the dropped frame
}

type dropRate struct {
	sel Selector
	p   float64
	max int // stop after this many (0: no limit)
	n   int
	r   *rand.Rand
}

// maxKeptFrames bounds Dropped's memory under a rate rule.
const maxKeptFrames = 1000

// maxLine bounds one protocol line (CONNECT carries JSON; the server's own
// limit is 4 KB by default): a longer line is bad input and ends the
// connection rather than growing a buffer without bound.
const maxLine = 1 << 20

// StartFaultProxy listens on a free 127.0.0.1 port and forwards every
// connection to target (host:port of a nats-server). Close stops it.
func StartFaultProxy(target string) (*FaultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the fault proxy: %w", err)
	}
	p := &FaultProxy{target: target, ln: ln, conns: map[int]net.Conn{}, forwarded: map[string]int{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's nats:// URL, for a client's nats.url.
func (p *FaultProxy) URL() string { return "nats://" + p.Addr() }

// DropNext arms a one-shot rule: the next publish sel selects, on any
// connection, is dropped. The returned channel receives that frame.
func (p *FaultProxy) DropNext(sel Selector) <-chan Frame {
	d := dropOnce{sel: sel, done: make(chan Frame, 1)}
	p.mu.Lock()
	p.once = append(p.once, d)
	p.mu.Unlock()
	return d.done
}

// NotifyNext arms a one-shot watch: the returned channel receives the next
// publish sel selects that the proxy forwards (e.g. a resend of a dropped
// message).
func (p *FaultProxy) NotifyNext(sel Selector) <-chan Frame {
	d := dropOnce{sel: sel, done: make(chan Frame, 1)}
	p.mu.Lock()
	p.watches = append(p.watches, d)
	p.mu.Unlock()
	return d.done
}

// DropRate drops each publish sel selects with probability prob (seeded,
// so a run can be repeated), at most limit of them (0: no limit); a rate
// of 0 switches the rule off.
func (p *FaultProxy) DropRate(sel Selector, prob float64, limit int, seed uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if prob <= 0 {
		p.rate = nil
		return
	}
	p.rate = &dropRate{sel: sel, p: prob, max: limit, r: rand.New(rand.NewPCG(seed, 7))}
}

// Dropped lists the frames dropped so far (the first maxKeptFrames).
func (p *FaultProxy) Dropped() []Frame {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Frame(nil), p.dropped...)
}

// Drops counts the frames dropped so far.
func (p *FaultProxy) Drops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drops
}

// Forwarded counts the publishes forwarded on subjects matching pattern.
func (p *FaultProxy) Forwarded(pattern string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s, c := range p.forwarded {
		if subjectMatch(pattern, s) {
			n += c
		}
	}
	return n
}

// Conns counts the client connections accepted so far.
func (p *FaultProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *FaultProxy) Close() error {
	select {
	case <-p.closed:
		return nil
	default:
	}
	close(p.closed)
	err := p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			// The broker is down: the client sees a closed connection and
			// reconnects, as it would to the broker itself.
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		select {
		case <-p.closed:
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		default:
		}
		p.accepted++
		id := p.accepted
		p.nextConn += 2
		ck, sk := p.nextConn-1, p.nextConn
		p.conns[ck], p.conns[sk] = c, s
		p.mu.Unlock()
		var pair sync.WaitGroup
		pair.Add(2)
		end := func() {
			_ = c.Close()
			_ = s.Close()
		}
		p.wg.Add(3)
		go func() { // server -> client, untouched
			defer p.wg.Done()
			defer pair.Done()
			_, _ = io.Copy(c, s)
			end()
		}()
		go func() { // client -> server, frame by frame
			defer p.wg.Done()
			defer pair.Done()
			_ = p.pipe(id, c, s)
			end()
		}()
		go func() {
			defer p.wg.Done()
			pair.Wait()
			p.mu.Lock()
			delete(p.conns, ck)
			delete(p.conns, sk)
			p.mu.Unlock()
		}()
	}
}

// pipe copies the client's protocol stream to the server, dropping the
// publishes the rules select.
func (p *FaultProxy) pipe(conn int, client io.Reader, server io.Writer) error {
	r := bufio.NewReaderSize(client, 64<<10)
	w := bufio.NewWriterSize(server, 64<<10)
	for {
		line, err := readLine(r)
		if err != nil {
			_ = w.Flush()
			return err
		}
		op, args, _ := strings.Cut(strings.TrimRight(string(line), "\r\n"), " ")
		switch strings.ToUpper(op) {
		case "PUB", "HPUB":
			f, hdrLen, ok := parsePub(strings.ToUpper(op) == "HPUB", args)
			if !ok {
				// Not a frame this parser understands: pass it on and let
				// the server judge it.
				if _, err := w.Write(line); err != nil {
					return err
				}
				break
			}
			f.Conn, f.At = conn, time.Now()
			hdr := make([]byte, hdrLen)
			if _, err := io.ReadFull(r, hdr); err != nil {
				return err
			}
			if hdrLen > 0 {
				f.Header = parseHeader(hdr)
			}
			rest := int64(f.Size-hdrLen) + 2 // payload and its CRLF
			if p.drop(f) {
				if _, err := io.CopyN(io.Discard, r, rest); err != nil {
					return err
				}
				break
			}
			if _, err := w.Write(line); err != nil {
				return err
			}
			if _, err := w.Write(hdr); err != nil {
				return err
			}
			if _, err := io.CopyN(w, r, rest); err != nil {
				return err
			}
			p.forwardedFrame(f)
		default:
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// forwardedFrame counts f and fires the first watch that selects it.
func (p *FaultProxy) forwardedFrame(f Frame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forwarded[f.Subject]++
	for i, d := range p.watches {
		if d.sel(f) {
			d.done <- f
			p.watches = append(p.watches[:i], p.watches[i+1:]...)
			break
		}
	}
}

// drop reports whether f is to be lost, and records it.
func (p *FaultProxy) drop(f Frame) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	hit := false
	for i, d := range p.once {
		if d.sel(f) {
			d.done <- f
			p.once = append(p.once[:i], p.once[i+1:]...)
			hit = true
			break
		}
	}
	if !hit && p.rate != nil && p.rate.sel(f) && (p.rate.max == 0 || p.rate.n < p.rate.max) && p.rate.r.Float64() < p.rate.p {
		p.rate.n++
		hit = true
	}
	if hit {
		p.drops++
		if len(p.dropped) < maxKeptFrames {
			p.dropped = append(p.dropped, f)
		}
	}
	return hit
}

var errLongLine = errors.New("fault proxy: protocol line too long")

// readLine reads one protocol line with its "\n", bounded by maxLine.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line) > maxLine {
				return nil, errLongLine
			}
		default:
			return nil, err
		}
	}
}

// parsePub reads "subject [reply] size" (PUB) or "subject [reply]
// hdr_size total_size" (HPUB).
func parsePub(hpub bool, args string) (f Frame, hdrLen int, ok bool) {
	a := strings.Fields(args)
	nums := 1
	if hpub {
		nums = 2
	}
	if len(a) != 1+nums && len(a) != 2+nums {
		return f, 0, false
	}
	f.Subject = a[0]
	if len(a) == 2+nums {
		f.Reply = a[1]
	}
	size, err := strconv.Atoi(a[len(a)-1])
	if err != nil || size < 0 {
		return f, 0, false
	}
	f.Size = size
	if hpub {
		hdrLen, err = strconv.Atoi(a[len(a)-2])
		if err != nil || hdrLen < 0 || hdrLen > size {
			return f, 0, false
		}
	}
	return f, hdrLen, true
}

// parseHeader reads "NATS/1.0\r\nKey: Value\r\n…\r\n\r\n" (the first value
// of each key).
func parseHeader(b []byte) map[string]string {
	h := map[string]string{}
	lines := bytes.Split(b, []byte("\r\n"))
	for _, l := range lines[min(1, len(lines)):] {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		key := string(bytes.TrimSpace(k))
		if _, seen := h[key]; !seen {
			h[key] = string(bytes.TrimSpace(v))
		}
	}
	return h
}

// subjectMatch matches a NATS subject against a pattern with '*' and '>'.
func subjectMatch(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, t := range pt {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}
