package testservers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// VersityGWVersion is the S3 server tests run against: versitygw (Apache
// 2.0, a real S3 implementation over a POSIX directory), installed by
// scripts/install-servers.sh with `go install` into S3ServerCacheDir.
const VersityGWVersion = "v1.8.0"

// S3Region is the region the test server answers for.
const S3Region = "us-east-1"

// S3Server is a running S3 server.
type S3Server struct {
	// Endpoint is the server's URL (http://127.0.0.1:PORT).
	Endpoint string
	// AccessKey and SecretKey are the root credentials, generated at start.
	AccessKey, SecretKey string
	// DataDir holds one directory per bucket (the posix backend).
	DataDir string
	// AdminEndpoint serves versitygw's admin API (users).
	AdminEndpoint string
	bin           string
	proc          *serverProc
}

// S3Bucket is a test's bucket of its own on the shared S3 server.
type S3Bucket struct {
	*S3Server
	// Bucket is the bucket's name, unique to the test.
	Bucket string
}

// URL is the s3:// URL of key in the test's bucket.
func (b *S3Bucket) URL(key string) string {
	return "s3://" + b.Bucket + "/" + strings.TrimPrefix(key, "/")
}

// Env is the environment a precog process needs to reach the server
// through the AWS SDK's standard chain: credentials, region, endpoint.
func (s *S3Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + S3Region,
		"AWS_ENDPOINT_URL_S3=" + s.Endpoint,
	}
}

// Client is an S3 client of the test's own on the server (for a test to
// look at or plant objects behind precog's back).
func (s *S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       S3Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

var (
	s3Once   sync.Once
	s3Shared *S3Server
	s3Err    error
)

// S3 returns a fresh, empty bucket on the shared S3 server (started on
// first use, with credentials generated for this test binary), removed at
// cleanup. The first call also puts the server's Env into this process's
// environment, so that code under test finds it through the AWS SDK's
// standard chain as it would find AWS (tests must not set other AWS_*
// variables), and points PRECOG_OBJECT_CACHE_DIR into the server's temp
// dir unless it is set. A missing server binary fails the test (run `make servers`).
func S3(t testing.TB) *S3Bucket {
	t.Helper()
	s3Once.Do(func() {
		s3Shared, s3Err = startS3()
		if s3Err == nil {
			for _, kv := range s3Shared.Env() {
				k, v, _ := strings.Cut(kv, "=")
				os.Setenv(k, v)
			}
			if os.Getenv("PRECOG_OBJECT_CACHE_DIR") == "" {
				// Objects fetched whole (models) are cached in the
				// server's temp dir, not the user's cache.
				os.Setenv("PRECOG_OBJECT_CACHE_DIR", filepath.Join(filepath.Dir(s3Shared.DataDir), "object-cache"))
			}
		}
	})
	if s3Err != nil {
		if strings.Contains(s3Err.Error(), "not installed") {
			missingBinary(t, "versitygw "+VersityGWVersion, s3Err)
		}
		t.Fatal(s3Err)
	}
	name := strings.ReplaceAll(strings.ToLower(uniqueName("t")), "_", "-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s3Shared.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("testservers: create bucket %s: %v", name, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(s3Shared.DataDir, name)) })
	return &S3Bucket{S3Server: s3Shared, Bucket: name}
}

// StartS3 starts an S3 server for a program that is not a test (the bench)
// and returns it with one bucket, name, created. StopAll stops it.
func StartS3(bucket string) (*S3Server, error) {
	s, err := startS3()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		s.proc.stop()
		return nil, fmt.Errorf("testservers: create bucket %s: %w", bucket, err)
	}
	return s, nil
}

// S3ServerCacheDir is where scripts/install-servers.sh installs server
// binaries built from Go modules: $PRECOG_SERVERS_CACHE, else
// $XDG_CACHE_HOME/precog-servers, else ~/.cache/precog-servers.
func S3ServerCacheDir() string {
	if d := os.Getenv("PRECOG_SERVERS_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "precog-servers")
	}
	return filepath.Join(os.TempDir(), "precog-servers")
}

// versityGW finds the server binary: the pinned version in the cache,
// else versitygw on PATH.
func versityGW() (string, error) {
	p := filepath.Join(S3ServerCacheDir(), "versitygw-"+VersityGWVersion, "versitygw")
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("testservers: versitygw not installed (looked for %s and on PATH); run `make servers`", p)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startS3 starts versitygw's posix backend on a free port in a temp dir,
// with metadata in a sidecar directory (no xattr support needed).
func startS3() (*S3Server, error) {
	bin, err := versityGW()
	if err != nil {
		return nil, err
	}
	dir, err := makeTempDir("s3")
	if err != nil {
		return nil, err
	}
	data, meta := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	for _, d := range []string{data, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("testservers: %w", err)
		}
	}
	s := &S3Server{AccessKey: "AK" + randomHex(9), SecretKey: randomHex(20), DataDir: data}
	s.bin = bin
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		aport, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(aport))
		iam := filepath.Join(dir, fmt.Sprintf("iam-%d", attempt))
		if err := os.MkdirAll(iam, 0o700); err != nil {
			return nil, fmt.Errorf("testservers: %w", err)
		}
		cmd := exec.Command(bin, "--port", addr, "--admin-port", admin, "--iam-dir", iam, "--region", S3Region, "--quiet",
			"posix", "--sidecar", meta, data)
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
		proc, err := startProc("versitygw", cmd, filepath.Join(dir, "versitygw.log"), syscall.SIGTERM)
		if err != nil {
			return nil, err
		}
		err = waitTCP(proc, addr, 30*time.Second)
		if err == nil {
			err = waitTCP(proc, admin, 30*time.Second)
		}
		if err != nil {
			lastErr = err
			proc.stop()
			continue
		}
		proc.dir, proc.removeDir = dir, true
		s.proc, s.Endpoint, s.AdminEndpoint = proc, "http://"+addr, "http://"+admin
		return s, nil
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("testservers: versitygw did not start: %w", lastErr)
}

// ReadOnlyEnv creates a user of the server, with generated credentials,
// that the bucket's policy lets list and read but not write, and returns
// the environment of a process running as that user: a bucket that
// refuses writes, as a least-privilege role would.
func (b *S3Bucket) ReadOnlyEnv(t testing.TB) []string {
	t.Helper()
	ak, sk := "RO"+randomHex(9), randomHex(20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.bin, "admin", "--access", b.AccessKey, "--secret", b.SecretKey, "--endpoint-url", b.AdminEndpoint,
		"create-user", "--access", ak, "--secret", sk, "--role", "user").CombinedOutput()
	if err != nil {
		t.Fatalf("testservers: create S3 user: %v\n%s", err, out)
	}
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":[%q]},"Action":["s3:GetObject","s3:ListBucket"],"Resource":["arn:aws:s3:::%s","arn:aws:s3:::%s/*"]}]}`, ak, b.Bucket, b.Bucket)
	if _, err := b.Client().PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(b.Bucket), Policy: aws.String(policy)}); err != nil {
		t.Fatalf("testservers: bucket policy: %v", err)
	}
	return []string{"AWS_ACCESS_KEY_ID=" + ak, "AWS_SECRET_ACCESS_KEY=" + sk}
}
