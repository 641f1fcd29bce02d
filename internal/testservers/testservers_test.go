package testservers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// Each test gets its own database: a table made in one is absent in another.
func TestPostgresIsolation(t *testing.T) {
	t.Parallel()
	start := time.Now()
	a := Postgres(t)
	t.Logf("first Postgres(t) (server start included): %s", time.Since(start))
	start = time.Now()
	b := Postgres(t)
	t.Logf("second Postgres(t): %s", time.Since(start))
	if a.DSN == b.DSN {
		t.Fatalf("two calls returned the same DSN %s", a.DSN)
	}
	a.Exec(t, "CREATE TABLE only_in_a (x int)")
	a.Exec(t, "INSERT INTO only_in_a VALUES (1)")
	ctx := context.Background()
	var n int
	if err := a.Pool(t).QueryRow(ctx, "SELECT count(*) FROM only_in_a").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count in a: %d, %v", n, err)
	}
	err := b.Pool(t).QueryRow(ctx, "SELECT count(*) FROM only_in_a").Scan(&n)
	if err == nil {
		t.Fatalf("table of database a visible in database b")
	}
}

// Parallel tests each get a working database.
func TestPostgresParallel(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			pg := Postgres(t)
			pg.Exec(t, "CREATE TABLE t (x int primary key)")
			pg.Exec(t, "INSERT INTO t VALUES ($1)", i)
		})
	}
}

// A database is dropped when its test ends.
func TestPostgresDropped(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) { name = Postgres(t).Database })
	admin := Postgres(t)
	conn, err := pgx.Connect(context.Background(), admin.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test", name)
	}
}

// Each test gets its own, empty DB index.
func TestRedisIsolation(t *testing.T) {
	t.Parallel()
	start := time.Now()
	a := Redis(t)
	t.Logf("first Redis(t): %s", time.Since(start))
	b := Redis(t)
	if a.DB == b.DB || a.Prefix == b.Prefix {
		t.Fatalf("two tests share DB %d / prefix %q", a.DB, a.Prefix)
	}
	ctx := context.Background()
	ca, cb := a.Client(t), b.Client(t)
	if err := ca.Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := cb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("key of DB %d visible in DB %d: %d %v", a.DB, b.DB, n, err)
	}
}

// A private server can be stopped (clients fail) and restarted (clients
// recover on the same address).
func TestNewRedisStopStart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := NewRedis(t)
	t.Logf("NewRedis: %s", time.Since(start))
	c := r.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded on a stopped server")
	}
	start = time.Now()
	r.Start()
	t.Logf("restart: %s", time.Since(start))
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Fatalf("key survived a restart without persistence")
	}
}

// A password set with extra arguments is enforced and known to Client.
func TestNewRedisPassword(t *testing.T) {
	t.Parallel()
	r := NewRedis(t, "--requirepass", "s3cret")
	if err := r.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING with password: %v", err)
	}
	anon := &RedisServer{Addr: r.Addr}
	if err := anon.Client(t).Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING without password succeeded")
	}
}

func TestNewPostgresRestart(t *testing.T) {
	pg := NewPostgres(t)
	pg.Exec(t, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (1)")
	pg.Restart(t, 200*time.Millisecond)
	var n int
	conn, err := pgx.Connect(context.Background(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM kept").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after restart: %d rows, %v", n, err)
	}
}

// The S3 server answers with the generated credentials, in a bucket of the
// test's own, and the install script builds the version this package pins.
func TestS3(t *testing.T) {
	t.Parallel()
	a, b := S3(t), S3(t)
	if a.Bucket == b.Bucket {
		t.Fatalf("two calls returned the same bucket %s", a.Bucket)
	}
	ctx := context.Background()
	if _, err := a.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(a.Bucket), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.Bucket), Key: aws.String("k")}); err == nil {
		t.Fatal("an object of bucket a is visible in bucket b")
	}
	bad := s3.New(s3.Options{Region: S3Region, BaseEndpoint: aws.String(a.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(a.AccessKey, "wrong", "")})
	if _, err := bad.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(a.Bucket), Key: aws.String("k")}); err == nil {
		t.Fatal("a wrong secret was accepted")
	}
	script, err := os.ReadFile("../../scripts/install-servers.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "VERSITYGW_VERSION="+VersityGWVersion+"\n") {
		t.Fatalf("scripts/install-servers.sh does not install versitygw %s", VersityGWVersion)
	}
}

// ReadOnlyEnv's user reads the bucket and is refused writes.
func TestS3ReadOnlyUser(t *testing.T) {
	t.Parallel()
	b := S3(t)
	ctx := context.Background()
	if _, err := b.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b.Bucket), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	var ak, sk string
	for _, kv := range b.ReadOnlyEnv(t) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "AWS_ACCESS_KEY_ID":
			ak = v
		case "AWS_SECRET_ACCESS_KEY":
			sk = v
		}
	}
	ro := s3.New(s3.Options{Region: S3Region, BaseEndpoint: aws.String(b.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ak, sk, "")})
	if _, err := ro.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.Bucket), Key: aws.String("k")}); err != nil {
		t.Fatalf("read-only user cannot read: %v", err)
	}
	if _, err := ro.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b.Bucket), Key: aws.String("w"), Body: strings.NewReader("v")}); err == nil {
		t.Fatal("read-only user could write")
	}
}
