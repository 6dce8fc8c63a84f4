package packstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

func TestS3StoreContract(t *testing.T) {
	srv := packstoretest.StartS3Server(t)
	first := srv.Open(t, "packs")
	if !first.Conditional() {
		t.Fatalf("versitygw %s enforces If-None-Match: *, but the probe said it does not", packstoretest.S3ServerVersion)
	}
	packstoretest.StoreContract(t, func(t *testing.T) packstore.Store { return srv.Open(t, "packs") })
}

// TestS3ClaimContract: the claim objects (the reader's PutClaim, the
// flusher's GetClaim, the claim GC's ListClaims and DeleteClaim) on the
// real S3 server of the store contract.
func TestS3ClaimContract(t *testing.T) {
	srv := packstoretest.StartS3Server(t)
	packstoretest.ClaimContract(t, func(t *testing.T) packstore.ClaimCollector { return srv.Open(t, "claims") })
}

// TestS3HeadAndCompareContract runs the contract in the fallback mode for
// servers without conditional puts, minus the concurrent-writer case it
// cannot guarantee.
func TestS3HeadAndCompare(t *testing.T) {
	srv := packstoretest.StartS3Server(t)
	ctx := context.Background()
	s := srv.Open(t, "packs")
	packstore.SetS3Conditional(s, false)
	p := proto.PackPath("shop1", "public.items", "p1")
	if err := s.Put(ctx, p, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, p, []byte("first")); err != nil {
		t.Fatalf("same bytes again: %v", err)
	}
	if err := s.Put(ctx, p, []byte("second")); !errors.Is(err, packstore.ErrImmutable) {
		t.Fatalf("overwrite: got %v, want ErrImmutable", err)
	}
}

// TestS3ImmutabilityNegativeControl switches the immutability rule off and
// shows the contract's overwrite check would then fail: the object changes.
func TestS3ImmutabilityNegativeControl(t *testing.T) {
	srv := packstoretest.StartS3Server(t)
	ctx := context.Background()
	s := srv.Open(t, "packs")
	packstore.SetS3NoCondition(s, true)
	p := proto.PackPath("shop1", "public.items", "p1")
	if err := s.Put(ctx, p, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, p, []byte("second")); err != nil {
		t.Fatalf("with the rule off the overwrite should go through, got %v", err)
	}
	got, err := s.Get(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "second" {
		t.Fatalf("negative control: want the pack overwritten, got %q", got)
	}
}

func TestS3CredentialsNeverPrinted(t *testing.T) {
	srv := packstoretest.StartS3Server(t)
	s := srv.Open(t, "packs")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("store", "store", s)
	for name, text := range map[string]string{
		"%v": fmt.Sprintf("%v", s), "%+v": fmt.Sprintf("%+v", s), "%#v": fmt.Sprintf("%#v", s),
		"String": s.String(), "slog": logged.String(),
	} {
		if strings.Contains(text, srv.Secret) || strings.Contains(text, srv.Access) {
			t.Errorf("%s prints a credential: %s", name, text)
		}
	}
	_, err := packstore.OpenS3(context.Background(), packstore.S3Options{Endpoint: srv.Endpoint, Bucket: "packs", AccessKey: srv.Access, SecretKey: "wrong-" + srv.Secret})
	if err == nil {
		t.Fatal("a wrong secret was accepted")
	}
	if strings.Contains(err.Error(), srv.Secret) {
		t.Fatalf("error prints the secret: %v", err)
	}
	tf := s.TableFunction(proto.PackPath("shop1", "public.items", "p1"))
	want := "s3('" + srv.Endpoint + "/packs/run/"
	if !strings.HasPrefix(tf, want) || !strings.HasSuffix(tf, "/shop1/public.items/p1.arrow', '"+srv.Access+"', '"+srv.Secret+"', 'Arrow')") {
		t.Fatalf("TableFunction = %s", tf)
	}
}

func TestS3MissingBucket(t *testing.T) {
	srv := packstoretest.StartS3Server(t)
	_, err := packstore.OpenS3(context.Background(), packstore.S3Options{Endpoint: srv.Endpoint, Bucket: "absent", AccessKey: srv.Access, SecretKey: srv.Secret})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("got %v, want a missing-bucket error", err)
	}
}

func TestS3OptionsFromConfig(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	for _, tc := range []struct {
		url, bucket, prefix string
		ok                  bool
	}{
		{"s3://packs", "packs", "", true},
		{"s3://packs/", "packs", "", true},
		{"s3://my.packs-1/a/b", "my.packs-1", "a/b", true},
		{"s3://Packs/x", "", "", false},
		{"s3://packs/../x", "", "", false},
		{"s3://packs/.hidden", "", "", false},
		{"file:///x", "", "", false},
	} {
		o, err := packstore.S3OptionsFromConfig(config.Packs{URL: tc.url, Endpoint: "http://s3:7070", AccessKey: "a", SecretKey: "b"})
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.url, err)
			continue
		}
		if tc.ok && (o.Bucket != tc.bucket || o.Prefix != tc.prefix || o.AccessKey != "a" || o.Endpoint != "http://s3:7070") {
			t.Errorf("%s: got %+v", tc.url, o)
		}
	}
}

func TestOpenConfigDirectory(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	s, err := packstore.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*packstore.DirStore); !ok || s.ID() != "local" {
		t.Fatalf("got %T %q, want the local directory store", s, s.ID())
	}
}

// TestS3RacingWritersNeedConditionalPut is the negative control of the
// conditional put: with HEAD-and-compare (the fallback for servers that
// ignore If-None-Match), racing writers of one path with different bytes
// can all succeed; with the conditional put exactly one does.
func TestS3RacingWritersNeedConditionalPut(t *testing.T) {
	srv := packstoretest.StartS3Server(t)
	ctx := context.Background()
	race := func(s *packstore.S3Store, path string) int {
		const n = 8
		errs := make(chan error, n)
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			go func() {
				<-start
				errs <- s.Put(ctx, path, []byte(fmt.Sprintf("writer-%d", i)))
			}()
		}
		close(start)
		winners := 0
		for i := 0; i < n; i++ {
			if err := <-errs; err == nil {
				winners++
			} else if !errors.Is(err, packstore.ErrImmutable) {
				t.Fatalf("writer: %v", err)
			}
		}
		return winners
	}
	s := srv.Open(t, "packs")
	for i := 0; i < 5; i++ {
		if w := race(s, proto.PackPath("shop1", "public.items", fmt.Sprintf("c%d", i))); w != 1 {
			t.Fatalf("conditional put: %d writers won, want 1", w)
		}
	}
	packstore.SetS3Conditional(s, false)
	most := 0
	for i := 0; i < 5 && most < 2; i++ {
		most = max(most, race(s, proto.PackPath("shop1", "public.items", fmt.Sprintf("h%d", i))))
	}
	if most < 2 {
		t.Fatalf("negative control: HEAD-and-compare never let two racing writers win in 5 races")
	}
	t.Logf("HEAD-and-compare: up to %d of 8 racing writers won", most)
}
