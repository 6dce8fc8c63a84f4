package packstore

// S3Store NOTES
//   - Put is one PutObject (atomic on every S3 server) with Content-MD5.
//     Immutability: If-None-Match: * when OpenS3's probe shows the server
//     refuses a conditional put over an existing key (412); a 412 then
//     means "something is there" and the bytes are compared (same bytes:
//     idempotent no-op; different: ErrImmutable); 409 (a concurrent
//     conditional write) is retried. Servers that ignore the header fall
//     back to GET-and-compare, which two racing writers can both pass.
//   - The SDK's default CRC trailers (aws-chunked) are off
//     (checksums "when required"): several S3-compatible servers reject them.
//   - List sorts what the server returns: not every server lists in strict
//     byte order, and the reconciler relies on lexical order.
//   - Credentials come only from the environment (config secret:"env", or
//     AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and are never printed:
//     String, GoString and LogValue name the bucket only. TableFunction does
//     carry them, as ClickHouse's s3() needs them; ClickHouse masks s3()
//     credentials in its query log.
//   - Tested against versitygw (posix backend), a real S3 server built by
//     deploy/fetch-s3server.sh; the test skips, saying so, without it.

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/sluice-cdc/sluice/shared/config"
)

// S3Options configures an S3Store. Credentials must come from the
// environment (config keeps them out of files); they are never logged and
// never appear in errors.
type S3Options struct {
	// Endpoint is the base URL of an S3-compatible server, e.g.
	// http://127.0.0.1:7070. Empty means Amazon S3 in Region.
	Endpoint string
	// Region defaults to us-east-1.
	Region string
	// Bucket holds the packs; Prefix (optional, no leading or trailing "/")
	// is prepended to every pack path.
	Bucket string
	Prefix string
	// AccessKey and SecretKey sign requests; both empty means anonymous
	// requests (and a TableFunction without credentials, so ClickHouse uses
	// its own).
	AccessKey string
	SecretKey string
	// StoreID is the store's identity; empty derives "s3:<bucket>[:<prefix>]".
	StoreID string
	// TableEndpoint is the base URL ClickHouse uses to read packs when it
	// reaches the server under another name; empty means Endpoint.
	TableEndpoint string
	// CreateBucket creates the bucket when it does not exist.
	CreateBucket bool
	// HTTPClient overrides the SDK's HTTP client.
	HTTPClient *http.Client
	// TLSCA is a PEM bundle of the CAs that sign an https:// Endpoint's
	// certificate (packs.tls_ca); empty uses the system roots.
	TLSCA string
}

// S3Store is a Store in an S3-compatible bucket. Put is one PUT (atomic on
// every S3 server); immutability uses a conditional put (If-None-Match: *)
// when the server enforces it, which OpenS3 probes once, else
// HEAD-and-compare, which cannot stop two racing writers of one path.
type S3Store struct {
	client    *s3.Client
	bucket    string
	prefix    string // "" or ending in "/"
	id        string
	tableBase string // <endpoint>/<bucket>/ for TableFunction
	access    string
	secret    string

	// conditional is true when the server refuses a conditional put over an
	// existing object (probed by OpenS3).
	conditional bool
	// noCondition makes Put an unconditional PUT with no check at all: a test
	// knob that switches the immutability rule off (negative control).
	noCondition bool
}

var (
	bucketRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	s3PrefixRe = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$`)
)

// ParseS3URL splits s3://bucket/prefix into its bucket and prefix.
func ParseS3URL(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" {
		return "", "", fmt.Errorf("parsing pack store URL: want s3://bucket[/prefix]")
	}
	bucket = u.Host
	prefix = strings.Trim(u.Path, "/")
	if !bucketRe.MatchString(bucket) {
		return "", "", fmt.Errorf("parsing pack store URL: bucket %q: want 3-63 of [a-z0-9.-]", bucket)
	}
	if prefix != "" && !s3PrefixRe.MatchString(prefix) {
		return "", "", fmt.Errorf("parsing pack store URL: prefix %q: want /-separated segments of [A-Za-z0-9_.-]", prefix)
	}
	return bucket, prefix, nil
}

// S3OptionsFromConfig builds S3Options from the packs section. Keys not set
// in the config fall back to the AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_REGION and AWS_ENDPOINT_URL_S3 environment variables.
func S3OptionsFromConfig(p config.Packs) (S3Options, error) {
	bucket, prefix, err := ParseS3URL(p.URL)
	if err != nil {
		return S3Options{}, err
	}
	o := S3Options{
		Endpoint: p.Endpoint, Region: p.Region, Bucket: bucket, Prefix: prefix,
		AccessKey: p.AccessKey, SecretKey: p.SecretKey, StoreID: p.StoreID, TLSCA: p.TLSCA,
	}
	if o.AccessKey == "" && o.SecretKey == "" {
		o.AccessKey, o.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	}
	if o.Region == "" {
		o.Region = os.Getenv("AWS_REGION")
	}
	if o.Endpoint == "" {
		o.Endpoint = os.Getenv("AWS_ENDPOINT_URL_S3")
	}
	return o, nil
}

// OpenConfig opens the pack store the config names: a directory for an
// empty or file:// packs.url, an S3Store (creating the bucket if needed)
// for s3://.
func OpenConfig(ctx context.Context, cfg config.Config) (Store, error) {
	if strings.HasPrefix(cfg.Packs.URL, "s3://") {
		o, err := S3OptionsFromConfig(cfg.Packs)
		if err != nil {
			return nil, err
		}
		o.CreateBucket = true
		return OpenS3(ctx, o)
	}
	id := cfg.Packs.StoreID
	if id == "" {
		id = "local"
	}
	return OpenDir(cfg.PacksDir(), id)
}

// OpenS3 connects to the bucket (creating it if asked), and probes whether
// the server enforces conditional puts.
func OpenS3(ctx context.Context, o S3Options) (*S3Store, error) {
	if !bucketRe.MatchString(o.Bucket) {
		return nil, fmt.Errorf("opening S3 pack store: bucket %q: want 3-63 of [a-z0-9.-]", o.Bucket)
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	if o.Prefix != "" && !s3PrefixRe.MatchString(o.Prefix) {
		return nil, fmt.Errorf("opening S3 pack store: prefix %q: want /-separated segments of [A-Za-z0-9_.-]", o.Prefix)
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return nil, fmt.Errorf("opening S3 pack store: set both the access key and the secret key (SLUICE_PACKS_ACCESS_KEY, SLUICE_PACKS_SECRET_KEY) or neither")
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.StoreID == "" {
		o.StoreID = "s3:" + o.Bucket
		if o.Prefix != "" {
			o.StoreID += ":" + strings.ReplaceAll(o.Prefix, "/", ":")
		}
		if len(o.StoreID) > 128 {
			o.StoreID = o.StoreID[:128]
		}
	}
	if !storeIDRe.MatchString(o.StoreID) {
		return nil, fmt.Errorf("opening S3 pack store: store id %q: want 1-128 of [A-Za-z0-9_.:-]", o.StoreID)
	}
	endpoint := strings.TrimRight(o.Endpoint, "/")
	if endpoint != "" {
		if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("opening S3 pack store: endpoint %q: want http(s)://host[:port]", o.Endpoint)
		}
	}
	s3o := s3.Options{
		Region:                     o.Region,
		UsePathStyle:               endpoint != "",
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if endpoint != "" {
		s3o.BaseEndpoint = aws.String(endpoint)
	}
	if o.AccessKey != "" {
		s3o.Credentials = credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, "")
	} else {
		s3o.Credentials = aws.AnonymousCredentials{}
	}
	if o.HTTPClient != nil {
		s3o.HTTPClient = o.HTTPClient
	} else if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("opening S3 pack store: reading packs.tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("opening S3 pack store: packs.tls_ca %s holds no PEM certificate", o.TLSCA)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		s3o.HTTPClient = &http.Client{Transport: tr}
	}
	tableEndpoint := strings.TrimRight(o.TableEndpoint, "/")
	if tableEndpoint == "" {
		tableEndpoint = endpoint
	}
	if tableEndpoint == "" {
		tableEndpoint = "https://s3." + o.Region + ".amazonaws.com"
	}
	s := &S3Store{
		client:    s3.New(s3o),
		bucket:    o.Bucket,
		id:        o.StoreID,
		tableBase: tableEndpoint + "/" + o.Bucket + "/",
		access:    o.AccessKey,
		secret:    o.SecretKey,
	}
	if o.Prefix != "" {
		s.prefix = o.Prefix + "/"
	}
	if err := s.ensureBucket(ctx, o.CreateBucket); err != nil {
		return nil, err
	}
	cond, err := s.probeConditional(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening S3 pack store %s: probing conditional puts: %w", s, err)
	}
	s.conditional = cond
	return s, nil
}

func (s *S3Store) ensureBucket(ctx context.Context, create bool) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	if httpStatus(err) != http.StatusNotFound {
		return fmt.Errorf("opening S3 pack store %s: checking the bucket: %w", s, err)
	}
	if !create {
		return fmt.Errorf("opening S3 pack store %s: bucket %q does not exist", s, s.bucket)
	}
	_, err = s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.bucket)})
	if err != nil && !hasCode(err, "BucketAlreadyOwnedByYou", "BucketAlreadyExists") {
		return fmt.Errorf("opening S3 pack store %s: creating the bucket: %w", s, err)
	}
	return nil
}

// probeConditional writes two different objects to one probe key outside
// the pack layout with If-None-Match: *; a server that accepts the second
// does not enforce conditional puts.
func (s *S3Store) probeConditional(ctx context.Context) (bool, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := s.prefix + ".sluice-probe/" + hex.EncodeToString(rnd[:])
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = s.client.DeleteObject(dctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	}()
	if err := s.putObject(ctx, key, []byte("a"), true); err != nil {
		if isNotImplemented(err) {
			return false, nil
		}
		return false, err
	}
	err := s.putObject(ctx, key, []byte("b"), true)
	switch {
	case err == nil:
		return false, nil
	case httpStatus(err) == http.StatusPreconditionFailed:
		return true, nil
	case isNotImplemented(err):
		return false, nil
	default:
		return false, err
	}
}

// ID implements Store.
func (s *S3Store) ID() string { return s.id }

// Conditional reports whether Put relies on the server's conditional put
// (true) or on HEAD-and-compare (false, not safe against racing writers).
func (s *S3Store) Conditional() bool { return s.conditional }

// String names the store without credentials.
func (s *S3Store) String() string {
	return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/")
}

// GoString keeps %#v from printing credentials.
func (s *S3Store) GoString() string { return "packstore.S3Store(" + s.String() + ")" }

// LogValue keeps slog from printing credentials.
func (s *S3Store) LogValue() slog.Value { return slog.StringValue(s.String()) }

func (s *S3Store) key(path string) string { return s.prefix + path }

// Put implements Store.
func (s *S3Store) Put(ctx context.Context, path string, data []byte) error {
	if err := ValidatePath(path); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing pack %s: %w", path, err)
	}
	key := s.key(path)
	if s.noCondition {
		if err := s.putObject(ctx, key, data, false); err != nil {
			return fmt.Errorf("writing pack %s: %w", path, err)
		}
		return nil
	}
	if !s.conditional {
		// HEAD-and-compare: refuses a different object that is already
		// there, but two racing writers can both pass the check.
		switch err := s.compare(ctx, key, data); {
		case err == nil:
			return nil
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("writing pack %s: %w", path, err)
		}
		if err := s.putObject(ctx, key, data, false); err != nil {
			return fmt.Errorf("writing pack %s: %w", path, err)
		}
		return nil
	}
	for attempt := 0; ; attempt++ {
		err := s.putObject(ctx, key, data, true)
		if err == nil {
			return nil
		}
		switch httpStatus(err) {
		case http.StatusPreconditionFailed:
			// Something is there: the same bytes are an idempotent no-op.
			cerr := s.compare(ctx, key, data)
			if cerr == nil || !errors.Is(cerr, ErrNotFound) {
				if cerr != nil {
					return fmt.Errorf("writing pack %s: %w", path, cerr)
				}
				return nil
			}
			// Deleted in between: try again.
		case http.StatusConflict:
			// ConditionalRequestConflict: a concurrent write; try again.
		default:
			return fmt.Errorf("writing pack %s: %w", path, err)
		}
		if attempt >= 8 {
			return fmt.Errorf("writing pack %s: giving up after %d conflicting attempts: %w", path, attempt+1, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("writing pack %s: %w", path, ctx.Err())
		case <-time.After(time.Duration(10<<attempt) * time.Millisecond):
		}
	}
}

// compare returns nil when key holds data, an error wrapping ErrImmutable
// when it holds other bytes, and one wrapping ErrNotFound when it is absent.
func (s *S3Store) compare(ctx context.Context, key string, data []byte) error {
	old, err := s.getObject(ctx, key)
	if err != nil {
		return err
	}
	if !bytes.Equal(old, data) {
		return ErrImmutable
	}
	return nil
}

func (s *S3Store) putObject(ctx context.Context, key string, data []byte, ifNoneMatch bool) error {
	sum := md5.Sum(data)
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(sum[:])),
		ContentType:   aws.String("application/vnd.apache.arrow.file"),
	}
	if ifNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := s.client.PutObject(ctx, in)
	return err
}

func (s *S3Store) getObject(ctx context.Context, key string) ([]byte, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if httpStatus(err) == http.StatusNotFound || hasCode(err, "NoSuchKey", "NotFound") {
			return nil, ErrNotFound
		}
		return nil, err
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if out.ContentLength != nil && *out.ContentLength > 0 && *out.ContentLength < 1<<31 {
		buf.Grow(int(*out.ContentLength))
	}
	if _, err := io.Copy(&buf, out.Body); err != nil {
		return nil, err
	}
	if out.ContentLength != nil && int64(buf.Len()) != *out.ContentLength {
		return nil, fmt.Errorf("short read: %d of %d bytes", buf.Len(), *out.ContentLength)
	}
	return buf.Bytes(), nil
}

// Get implements Store.
func (s *S3Store) Get(ctx context.Context, path string) ([]byte, error) {
	if err := ValidatePath(path); err != nil {
		return nil, err
	}
	b, err := s.getObject(ctx, s.key(path))
	if err != nil {
		return nil, fmt.Errorf("reading pack %s: %w", path, err)
	}
	return b, nil
}

// List implements Store. It collects the keys under prefix before calling
// fn, sorted, because not every S3-compatible server lists in strict byte
// order; memory is therefore proportional to the number of packs under
// prefix (list per destination for very large stores).
func (s *S3Store) List(ctx context.Context, prefix string, fn func(path string) error) error {
	return s.ListAfter(ctx, prefix, "", fn)
}

// ListAfter implements ListerAfter with ListObjectsV2's StartAfter: the
// server lists nothing before it.
func (s *S3Store) ListAfter(ctx context.Context, prefix, startAfter string, fn func(path string) error) error {
	if err := validatePrefix(prefix); err != nil {
		return err
	}
	var paths []string
	in := &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.key(prefix)),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.key(startAfter))
	}
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing packs under %q: %w", prefix, err)
		}
		for _, obj := range page.Contents {
			rel, ok := strings.CutPrefix(aws.ToString(obj.Key), s.prefix)
			if !ok || !strings.HasPrefix(rel, prefix) || rel <= startAfter || ValidatePath(rel) != nil || IsSegmentPath(rel) && !IsSegmentPath(prefix) {
				continue
			}
			paths = append(paths, rel)
		}
	}
	sort.Strings(paths)
	for i, path := range paths {
		if i > 0 && path == paths[i-1] {
			continue
		}
		if err := fn(path); err != nil {
			return err
		}
	}
	return nil
}

// TableFunction implements Store: s3('<endpoint>/<bucket>/<key>',
// '<access>', '<secret>', 'Arrow'), or without credentials when the store
// has none. The result carries the secret: pass it to ClickHouse, never to a
// log.
func (s *S3Store) TableFunction(path string) string {
	u := QuoteString(s.tableBase + s.key(path))
	if s.access == "" {
		return "s3(" + u + ", 'Arrow')"
	}
	return "s3(" + u + ", " + QuoteString(s.access) + ", " + QuoteString(s.secret) + ", 'Arrow')"
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func hasCode(err error, codes ...string) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	for _, c := range codes {
		if ae.ErrorCode() == c {
			return true
		}
	}
	return false
}

func isNotImplemented(err error) bool {
	return httpStatus(err) == http.StatusNotImplemented || hasCode(err, "NotImplemented")
}

var (
	_ Store       = (*S3Store)(nil)
	_ ListerAfter = (*S3Store)(nil)
)
