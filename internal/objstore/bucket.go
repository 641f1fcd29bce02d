package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// Call limits. Every call to a store runs under one of these timeouts; the
// SDK retries throttling, 5xx and connection errors up to maxAttempts with
// jittered exponential backoff capped at maxBackoff, and a ranged read
// whose body breaks is retried the same way by ReadRange.
const (
	callTimeout  = 2 * time.Minute  // one metadata call, one list page, one ranged read
	writeTimeout = 15 * time.Minute // one object written (a shard's file)
	maxAttempts  = 5
	maxBackoff   = 5 * time.Second
	dialTimeout  = 10 * time.Second
	// headerTimeout bounds the wait for a response's headers, so that a
	// server that accepts and then stalls fails the call instead of hanging.
	headerTimeout = 30 * time.Second
)

// Bucket is an opened bucket (or Azure container). It is safe for
// concurrent use and lives for the process.
type Bucket struct {
	b   *blob.Bucket
	loc Location
}

var (
	bucketsMu sync.Mutex
	buckets   = map[string]*Bucket{}
)

// Open returns the bucket of loc, opened once per process for each
// (scheme, bucket, endpoint, region).
func Open(ctx context.Context, loc Location) (*Bucket, error) {
	id := loc.WithKey("").String()
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	if b, ok := buckets[id]; ok {
		return b, nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var bb *blob.Bucket
	var err error
	switch loc.Scheme {
	case "s3":
		bb, err = openS3(ctx, loc)
	case "gs", "azblob":
		if !cloudDrivers {
			return nil, fmt.Errorf("opening %s: this build of precog (the GPU check's, -tags gpucheck) has no %s:// driver", loc.ObjectURL(""), loc.Scheme)
		}
		bb, err = blob.OpenBucket(ctx, loc.Scheme+"://"+loc.Bucket)
	default:
		bb, err = blob.OpenBucket(ctx, loc.Scheme+"://"+loc.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", loc.ObjectURL(""), err)
	}
	b := &Bucket{b: bb, loc: loc.WithKey("")}
	buckets[id] = b
	return b, nil
}

// S3Endpoint is the S3-compatible endpoint loc is served by: the URL's
// endpoint option, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL; empty
// for AWS itself.
func S3Endpoint(loc Location) string {
	for _, e := range []string{loc.Endpoint, os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL")} {
		if e != "" {
			return e
		}
	}
	return ""
}

// openS3 builds an S3 client from the AWS SDK's default chain (environment,
// shared profile, web identity for IRSA, instance metadata). A custom
// endpoint always gets path-style addressing: S3-compatible servers rarely
// serve virtual-hosted buckets.
func openS3(ctx context.Context, loc Location) (*blob.Bucket, error) {
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = dialTimeout }).
		WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = headerTimeout
			t.MaxIdleConnsPerHost = 64
		})
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return awsretry.NewStandard(func(o *awsretry.StandardOptions) {
				o.MaxAttempts = maxAttempts
				o.MaxBackoff = maxBackoff
			})
		}))
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	if loc.Region != "" {
		cfg.Region = loc.Region
	}
	endpoint := S3Endpoint(loc)
	if cfg.Region == "" {
		cfg.Region = "us-east-1" // S3-compatible servers ignore it; AWS redirects
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
		// Ranged reads carry no whole-object checksum; the SDK would log
		// that it skipped one on every read.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	return s3blob.OpenBucket(ctx, client, loc.Bucket, nil)
}

// Location is the bucket's location (empty key).
func (b *Bucket) Location() Location { return b.loc }

// Attrs is what a caller needs of one object.
type Attrs struct {
	Size    int64
	ModTime time.Time
	// ETag changes with every write of the object; plans compare it to
	// detect an input rewritten after planning.
	ETag string
}

// NotFound reports whether err says the object does not exist.
func NotFound(err error) bool {
	return gcerrors.Code(err) == gcerrors.NotFound || s3Code(err) == "NoSuchKey"
}

// PreconditionFailed reports whether a conditional write found the object
// already there (IfNotExist) or changed since it was read (WriteIfMatch).
func PreconditionFailed(err error) bool {
	return gcerrors.Code(err) == gcerrors.FailedPrecondition || s3Code(err) == "PreconditionFailed"
}

// s3Code is the S3 error code of an error from the S3 client itself (not
// through gocloud, which maps its own).
func s3Code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// Attributes returns key's size, modification time and ETag.
func (b *Bucket) Attributes(ctx context.Context, key string) (Attrs, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	a, err := b.b.Attributes(ctx, key)
	if err != nil {
		return Attrs{}, fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	return Attrs{Size: a.Size, ModTime: a.ModTime, ETag: a.ETag}, nil
}

// ReadRange reads len(dst) bytes of key from off into dst. A body that
// breaks mid-read is read again (bounded attempts, jittered backoff).
func (b *Bucket) ReadRange(ctx context.Context, key string, off int64, dst []byte) error {
	var err error
	for attempt := range maxAttempts {
		if attempt > 0 {
			if werr := sleep(ctx, attempt); werr != nil {
				return errors.Join(err, werr)
			}
		}
		if err = b.readRangeOnce(ctx, key, off, dst); err == nil || NotFound(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (b *Bucket) readRangeOnce(ctx context.Context, key string, off int64, dst []byte) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	r, err := b.b.NewRangeReader(ctx, key, off, int64(len(dst)), nil)
	if err != nil {
		return fmt.Errorf("%s: reading bytes %d..%d: %w", b.loc.ObjectURL(key), off, off+int64(len(dst)), err)
	}
	defer r.Close()
	if _, err := io.ReadFull(r, dst); err != nil {
		return fmt.Errorf("%s: reading bytes %d..%d: %w", b.loc.ObjectURL(key), off, off+int64(len(dst)), err)
	}
	return nil
}

// sleep waits the backoff before retry attempt (1-based): full jitter
// over an exponential window capped at maxBackoff.
func sleep(ctx context.Context, attempt int) error {
	d := min(maxBackoff, 100*time.Millisecond<<attempt)
	t := time.NewTimer(rand.N(d) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Download copies key into w, up to limit bytes (an object larger than
// limit is an error), and returns its attributes as read.
func (b *Bucket) Download(ctx context.Context, key string, w io.Writer, limit int64) (Attrs, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	r, err := b.b.NewReader(ctx, key, nil)
	if err != nil {
		return Attrs{}, fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	defer r.Close()
	a := Attrs{Size: r.Size(), ModTime: r.ModTime()}
	var out s3.GetObjectOutput
	if r.As(&out) {
		a.ETag = aws.ToString(out.ETag) // the ETag of the content read, for WriteIfMatch
	}
	if a.Size > limit {
		return Attrs{}, fmt.Errorf("%s: %d bytes, over the limit of %d", b.loc.ObjectURL(key), a.Size, limit)
	}
	n, err := io.Copy(w, io.LimitReader(r, limit+1))
	wholeBytes.Add(n)
	if err != nil {
		return Attrs{}, fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	if n != a.Size {
		return Attrs{}, fmt.Errorf("%s: read %d bytes of %d", b.loc.ObjectURL(key), n, a.Size)
	}
	return a, nil
}

var wholeBytes atomic.Int64

// FetchedBytesWhole is the total of bytes this process downloaded whole
// (models, tokenizers, small objects).
func FetchedBytesWhole() int64 { return wholeBytes.Load() }

// ReadAll returns a small object's content (at most limit bytes). A read
// whose content does not match the object's checksum (a store that
// overwrites an object in place, as versitygw's posix backend does, can
// serve a GET torn by a concurrent PUT) is read again, at most
// tornReadTries times in all, after a short jittered pause.
func (b *Bucket) ReadAll(ctx context.Context, key string, limit int64) ([]byte, error) {
	for try := 1; ; try++ {
		var buf limitedBuffer
		_, err := b.Download(ctx, key, &buf, limit)
		if err == nil {
			return buf.b, nil
		}
		if !tornRead(err) || try == tornReadTries {
			return nil, err
		}
		t := time.NewTimer(time.Duration(rand.Int64N(int64(20*time.Millisecond))) + 5*time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// tornReadTries bounds ReadAll's reads of one object.
const tornReadTries = 8

// tornRead reports whether err is the SDK's response checksum check failing.
func tornRead(err error) bool { return strings.Contains(err.Error(), "checksum did not match") }

type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) { l.b = append(l.b, p...); return len(p), nil }

// WriteOptions narrows a write.
type WriteOptions struct {
	// IfNotExist makes the write fail (PreconditionFailed) when key exists.
	IfNotExist  bool
	ContentType string
}

// Write stores r's content at key in one object; the object appears only
// when the whole content was written (a failed write leaves no object).
func (b *Bucket) Write(ctx context.Context, key string, r io.Reader, opts WriteOptions) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	ct := opts.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	w, err := b.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: ct, IfNotExist: opts.IfNotExist})
	if err != nil {
		return fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel() // abandons the upload
		_ = w.Close()
		return fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	return nil
}

// CanWriteIfMatch reports whether WriteIfMatch is available: on S3 only.
// GCS (generation preconditions) and Azure (If-Match) could do the same
// through gocloud's As hooks, but no real server of theirs runs in tests,
// so callers keep a read-check-write path there.
func (b *Bucket) CanWriteIfMatch() bool {
	var c *s3.Client
	return b.b.As(&c)
}

// WriteIfMatch replaces key with body only if the object's ETag is still
// etag (S3's conditional PutObject, If-Match): of two writers replacing the
// same version, one wins and the other gets PreconditionFailed; a key
// deleted meanwhile is NotFound. It returns the new object's ETag. S3 only
// (see CanWriteIfMatch).
func (b *Bucket) WriteIfMatch(ctx context.Context, key string, body []byte, etag, contentType string) (string, error) {
	var c *s3.Client
	if !b.b.As(&c) {
		return "", fmt.Errorf("%s: conditional replace (If-Match) is supported on s3:// only", b.loc.ObjectURL(key))
	}
	if etag == "" {
		return "", fmt.Errorf("%s: conditional replace without an ETag", b.loc.ObjectURL(key))
	}
	if strings.Contains(key, "../") || strings.ContainsFunc(key, func(r rune) bool { return r < 32 }) {
		// gocloud stores such keys escaped; this call bypasses it.
		return "", fmt.Errorf("%s: a key with \"../\" or control characters cannot be replaced conditionally", b.loc.ObjectURL(key))
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket:      aws.String(b.loc.Bucket),
		Key:         aws.String(key),
		Body:        bytes.NewReader(body),
		ContentType: aws.String(contentType),
		IfMatch:     aws.String(etag),
	})
	if err != nil {
		return "", fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	return aws.ToString(out.ETag), nil
}

// Delete removes key; a missing key is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := b.b.Delete(ctx, key); err != nil && !NotFound(err) {
		return fmt.Errorf("%s: %w", b.loc.ObjectURL(key), err)
	}
	return nil
}

// Object is one listed object.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// List calls fn for every object whose key starts with prefix, in key
// order, one page (and one timeout) at a time.
func (b *Bucket) List(ctx context.Context, prefix string, fn func(Object) error) error {
	token := blob.FirstPageToken
	for pages := 0; ; pages++ {
		if pages > maxListPages {
			return fmt.Errorf("%s: more than %d objects", b.loc.ObjectURL(prefix), maxListPages*listPageSize)
		}
		objs, next, err := b.listPage(ctx, prefix, token)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.IsDir {
				continue
			}
			if err := fn(Object{Key: o.Key, Size: o.Size, ModTime: o.ModTime}); err != nil {
				return err
			}
		}
		if len(next) == 0 {
			return nil
		}
		token = next
	}
}

const (
	listPageSize = 1000
	maxListPages = 10_000 // ten million objects under one prefix
)

func (b *Bucket) listPage(ctx context.Context, prefix string, token []byte) ([]*blob.ListObject, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	objs, next, err := b.b.ListPage(ctx, token, listPageSize, &blob.ListOptions{Prefix: prefix})
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", b.loc.ObjectURL(prefix), err)
	}
	return objs, next, nil
}
