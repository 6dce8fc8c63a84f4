package packstoretest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/packstore"
)

// S3ServerVersion is the versitygw release the S3 tests run against; the
// binary is built by deploy/fetch-s3server.sh into ~/.cache/sluice/bin.
const S3ServerVersion = "v1.8.0"

// S3Server is a real S3-compatible server (versitygw, posix backend) on a
// free loopback port, for the life of one test.
type S3Server struct {
	Endpoint, Access, Secret string
}

// S3ServerBinary is the versitygw binary: $SLUICE_S3SERVER, or the one
// deploy/fetch-s3server.sh builds.
func S3ServerBinary() string {
	if p := os.Getenv("SLUICE_S3SERVER"); p != "" {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "sluice", "bin", "versitygw-"+S3ServerVersion)
}

// StartS3Server runs the server until the test ends; without the binary
// the test is skipped.
func StartS3Server(t testing.TB) S3Server {
	t.Helper()
	bin := S3ServerBinary()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no S3 server binary at %s: run deploy/fetch-s3server.sh (make test does) or set SLUICE_S3SERVER", bin)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	iam := filepath.Join(dir, "iam")
	for _, d := range []string{data, iam} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv := S3Server{Endpoint: "http://" + addr, Access: "sluicetest", Secret: "sluice-test-secret-" + fmt.Sprint(time.Now().UnixNano())}
	cmd := exec.Command(bin, "--port", addr, "--iam-dir", iam, "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+srv.Access, "ROOT_SECRET_KEY="+srv.Secret)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(srv.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return srv
		}
		select {
		case <-exited:
			t.Fatalf("S3 server exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("S3 server not answering on %s after 20s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a child process's port
	}
}

var s3Seq atomic.Int64

// Open opens a store on bucket (created if missing) under a prefix of its
// own, so stores opened on one server never see each other's packs.
func (s S3Server) Open(t testing.TB, bucket string) *packstore.S3Store {
	t.Helper()
	st, err := packstore.OpenS3(context.Background(), packstore.S3Options{
		Endpoint: s.Endpoint, Bucket: bucket, Prefix: fmt.Sprintf("run/s%d", s3Seq.Add(1)),
		AccessKey: s.Access, SecretKey: s.Secret, CreateBucket: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
