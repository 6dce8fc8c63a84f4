package httpx

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// short are timeouts a test can wait out.
var short = Timeouts{ReadHeader: 300 * time.Millisecond, Read: 5 * time.Second, WriteStall: 300 * time.Millisecond, Idle: 300 * time.Millisecond}

func dial(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reads c until the server closes it and fails unless that
// happens within limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open for %v", what, limit)
	}
	return time.Since(start)
}

// TestIdleConnectionClosed: a keep-alive connection that sends no next
// request is closed after the idle timeout.
func TestIdleConnectionClosed(t *testing.T) {
	s := New("127.0.0.1:0", "", nil, nil, WithTimeouts(short))
	base := run(t, s)
	c := dial(t, base)
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+strings.TrimPrefix(base, "http://")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(3 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: %v after %v, want closed (EOF)", err, time.Since(start))
	}
	if d := time.Since(start); d < short.Idle/2 {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
}

// TestSlowlorisHeaderCut: a client that trickles its headers forever is cut
// off after the header timeout.
func TestSlowlorisHeaderCut(t *testing.T) {
	s := New("127.0.0.1:0", "", nil, nil, WithTimeouts(short))
	base := run(t, s)
	c := dial(t, base)
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+strings.TrimPrefix(base, "http://")+"\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := io.WriteString(c, "X-Drip: a\r\n"); err != nil {
				return
			}
		}
	}()
	closedWithin(t, c, 3*time.Second, "slowloris headers")
}

// TestWriteStallCut: a client that stops reading a streaming response is
// cut off once one write has stalled for WriteStall, while a handler that
// computes longer than WriteStall before it writes is not (the bound is per
// write, not per response: exports stream for as long as they progress).
func TestWriteStallCut(t *testing.T) {
	s := New("127.0.0.1:0", "", nil, nil, WithTimeouts(short))
	werr := make(chan error, 1)
	s.Handle("GET /stream", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 64<<10)
		start := time.Now()
		for time.Since(start) < 20*time.Second {
			if _, err := w.Write(chunk); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}))
	s.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(3 * short.WriteStall)
		for range 4 {
			_, _ = w.Write([]byte("part "))
			w.(http.Flusher).Flush()
			time.Sleep(short.WriteStall / 2)
		}
	}))
	base := run(t, s)

	c := dial(t, base)
	if _, err := io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: "+strings.TrimPrefix(base, "http://")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Never read.
	select {
	case err := <-werr:
		if err == nil {
			t.Fatal("the stalled response was written to the end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write to a client that stopped reading did not time out")
	}

	// Negative control: slow to start and slow between writes, but each
	// write completes: the response arrives whole.
	code, body := get(t, base+"/slow", "")
	if code != http.StatusOK || body != "part part part part " {
		t.Fatalf("slow handler: %d %q", code, body)
	}
}
