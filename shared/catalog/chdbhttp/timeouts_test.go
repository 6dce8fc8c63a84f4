package chdbhttp_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// TestServeTimeouts: `catalog serve` closes an idle keep-alive connection
// after the idle timeout and cuts a client that trickles its headers.
func TestServeTimeouts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	tm := httpx.Timeouts{ReadHeader: 300 * time.Millisecond, Idle: 300 * time.Millisecond}
	go func() {
		done <- chdbhttp.ServeTimeouts(ctx, ln, chdbhttp.New(chtest.Engine(t), chdbhttp.Options{User: "u", Password: "p"}), tm)
	}()
	defer func() { cancel(); <-done }()
	addr := ln.Addr().String()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/ping: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want closed", err)
	}

	s, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _ = io.WriteString(s, "POST / HTTP/1.1\r\nHost: "+addr+"\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := io.WriteString(s, "X-Drip: a\r\n"); err != nil {
				return
			}
		}
	}()
	_ = s.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = io.Copy(io.Discard, s)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a client trickling its headers kept the connection for 3s")
	}
}
