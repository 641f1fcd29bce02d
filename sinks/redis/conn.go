package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/jobs"
)

// Conn is where and how a Redis sink spec reaches its server: the one parse
// of addr/addrs (host:port, or a redis:// or rediss:// URL with user,
// password and db), credentials and TLS. The sink and `precog serve` both
// build their clients from it, so they reach the same server the same way
// and name it the same way, without its password.
//
// Its String, GoString and LogValue forms are the redacted Where: a Conn
// printed or logged by mistake never shows the password.
type Conn struct {
	Addrs    []string
	Username string
	Password string
	DB       int
	TLS      bool
	// secrets are the forms of the password a message may carry (as
	// written in the URL, percent-decoded, as given in the spec).
	secrets []string
}

// ParseConn reads the connection fields of spec. Explicit username,
// password, db and tls fields win over the URL's. Errors name the spec
// field and never contain the password.
func ParseConn(spec jobs.RedisSinkSpec) (Conn, error) {
	installLogger()
	c := Conn{Username: spec.Username, Password: spec.Password, DB: spec.DB, TLS: spec.TLS}
	c.secrets = appendSecret(c.secrets, spec.Password)
	switch {
	case spec.Addr != "" && len(spec.Addrs) > 0:
		return c, errors.New("sinks.redis: set addr or addrs, not both")
	case strings.HasPrefix(spec.Addr, "redis://") || strings.HasPrefix(spec.Addr, "rediss://"):
		raw := urlPassword(spec.Addr)
		c.secrets = appendSecret(c.secrets, raw)
		if dec, err := url.PathUnescape(raw); err == nil {
			c.secrets = appendSecret(c.secrets, dec)
		}
		opt, err := goredis.ParseURL(spec.Addr)
		if err != nil {
			return c, fmt.Errorf("sinks.redis.addr: %s", c.Redact(strings.ReplaceAll(err.Error(), spec.Addr, RedactURL(spec.Addr))))
		}
		c.Addrs = []string{opt.Addr}
		if c.Username == "" {
			c.Username = opt.Username
		}
		if c.Password == "" {
			c.Password = opt.Password
			c.secrets = appendSecret(c.secrets, opt.Password)
		}
		if c.DB == 0 {
			c.DB = opt.DB
		}
		c.TLS = c.TLS || opt.TLSConfig != nil
	case spec.Addr != "":
		c.Addrs = []string{spec.Addr}
	case len(spec.Addrs) > 0:
		c.Addrs = append([]string(nil), spec.Addrs...)
	default:
		return c, errors.New("sinks.redis.addr: required (host:port, redis:// URL, or addrs for a cluster)")
	}
	rememberSecrets(append(c.secrets, c.Password))
	for i, a := range c.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return c, fmt.Errorf("sinks.redis.addrs[%d]: %q is not host:port: %s", i, c.Redact(a), c.Redact(err.Error()))
		}
	}
	if c.DB < 0 {
		return c, fmt.Errorf("sinks.redis.db: %d is negative", c.DB)
	}
	if len(c.Addrs) > 1 && c.DB != 0 {
		return c, fmt.Errorf("sinks.redis.db: Redis Cluster (addrs) has only DB 0, got %d", c.DB)
	}
	return c, nil
}

func appendSecret(s []string, v string) []string {
	if v == "" {
		return s
	}
	return append(s, v)
}

// ClusterMode reports whether the Conn addresses a Redis Cluster.
func (c Conn) ClusterMode() bool { return len(c.Addrs) > 1 }

// Where names the server(s) for errors, logs, metric labels and readiness
// bodies: the addresses, and the db when not 0. It never holds a credential.
func (c Conn) Where() string {
	w := strings.Join(c.Addrs, ",")
	if c.DB != 0 {
		w += "/" + strconv.Itoa(c.DB)
	}
	return w
}

// String is Where: a Conn formatted by mistake shows no password.
func (c Conn) String() string { return c.Where() }

// GoString is Where, for %#v.
func (c Conn) GoString() string { return "redis.Conn(" + c.Where() + ")" }

// LogValue is Where, for slog.
func (c Conn) LogValue() slog.Value { return slog.StringValue(c.Where()) }

// Key identifies the connection for sharing one client between specs that
// reach the same server with the same credentials. It holds the password:
// use it as a map key only, never show it.
func (c Conn) Key() string {
	return fmt.Sprintf("%s|%d|%s|%s|%v", strings.Join(c.Addrs, ","), c.DB, c.Username, c.Password, c.TLS)
}

// Redact removes every form of the password from msg.
func (c Conn) Redact(msg string) string {
	return redact(msg, append(c.secrets, c.Password)...)
}

// Options is the base of a client's options: addresses, credentials, db,
// TLS and cluster mode. Callers add their own timeouts and pool sizes.
func (c Conn) Options() *goredis.UniversalOptions {
	var tlsConf *tls.Config
	if c.TLS {
		host, _, _ := net.SplitHostPort(c.Addrs[0])
		tlsConf = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return &goredis.UniversalOptions{
		Addrs:           append([]string(nil), c.Addrs...),
		DB:              c.DB,
		Username:        c.Username,
		Password:        c.Password,
		TLSConfig:       tlsConf,
		IsClusterMode:   c.ClusterMode(),
		DisableIdentity: true,
	}
}

// RedactURL replaces the password of a URL-shaped address with [REDACTED];
// other text is returned unchanged.
func RedactURL(addr string) string {
	p := urlPassword(addr)
	if p == "" {
		return addr
	}
	return strings.Replace(addr, ":"+p+"@", ":[REDACTED]@", 1)
}
