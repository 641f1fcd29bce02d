package jobs

import (
	"strings"
	"testing"
)

// TestRedactSecrets: every credential form a spec can hold is removed,
// literal or expanded, and everything else, ${VAR} references included,
// is kept as written.
func TestRedactSecrets(t *testing.T) {
	const pw = "Lit3ral-pw"
	for _, c := range []struct{ in, want string }{
		{`dsn: "postgres://app:` + pw + `@db.internal:5432/preds?sslmode=require"`, `dsn: "postgres://app:[REDACTED]@db.internal:5432/preds?sslmode=require"`},
		{`dsn: postgres://app:` + pw + `@db:5432/x, table: t`, `dsn: postgres://app:[REDACTED]@db:5432/x, table: t`},
		{`redis: { addr: "redis://:` + pw + `@127.0.0.1:6379/0" }`, `redis: { addr: "redis://:[REDACTED]@127.0.0.1:6379/0" }`},
		{`rediss://user:` + pw + `@h:6380`, `rediss://user:[REDACTED]@h:6380`},
		{`dsn: "host=db user=app password=` + pw + ` dbname=x"`, `dsn: "host=db user=app password=[REDACTED] dbname=x"`},
		{`dsn: "host=db password='` + pw + ` x' dbname=x"`, `dsn: "host=db password='[REDACTED]' dbname=x"`},
		{`postgres://db/x?user=app&password=` + pw + `&sslmode=off`, `postgres://db/x?user=app&password=[REDACTED]&sslmode=off`},
		{`    password: ` + pw, `    password: [REDACTED]`},
		{`{"Password":"` + pw + `","addr":"h:1"}`, `{"Password":"[REDACTED]","addr":"h:1"}`},
		// Kept: references, URLs without a password, ports, queries with @.
		{`dsn: "${DATABASE_URL}"`, `dsn: "${DATABASE_URL}"`},
		{`addr: "redis://:${REDIS_PW}@127.0.0.1:6379/0"`, `addr: "redis://:${REDIS_PW}@127.0.0.1:6379/0"`},
		{`password: ${REDIS_PW}`, `password: ${REDIS_PW}`},
		{`postgres://app@db:5432/x`, `postgres://app@db:5432/x`},
		{`http://h:8080/x?mail=a@b`, `http://h:8080/x?mail=a@b`},
		{`addr: 127.0.0.1:6379`, `addr: 127.0.0.1:6379`},
	} {
		got := RedactSecrets(c.in)
		if got != c.want {
			t.Errorf("RedactSecrets(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
		if strings.Contains(got, pw) {
			t.Errorf("RedactSecrets(%q) keeps the password", c.in)
		}
		if again := RedactSecrets(got); again != got {
			t.Errorf("not idempotent: %q → %q", got, again)
		}
	}
}
