package docgen

// fieldNote is what the reference says of a field whose Go doc comment in
// package jobs is missing or too terse for a user. A field with neither a
// doc comment nor a note fails TestSpecReferenceComplete, so a new spec
// field cannot reach the reference undocumented.
type fieldNote struct {
	Doc string
	// Allowed, when set, replaces the allowed values read from the code
	// (typed constants, "a | b" in the comment).
	Allowed string
	// Default, when set, is shown where parsing leaves the field empty and
	// the value is decided later (e.g. from the model file).
	Default string
}

var fieldNotes = map[string]fieldNote{
	"name":                           {Doc: "The job's name: 1 to 63 lowercase letters, digits and `-`. Runs are `<name>-<version>`; the ledger, locks and checks are per job."},
	"schedule":                       {Doc: "A 5-field cron expression (minute hour day-of-month month day-of-week), evaluated in `timezone` by `precog scheduler`. No `@every`, no `TZ=` prefix. Absent: the job runs only when started. See [scheduling.md](scheduling.md)."},
	"timezone":                       {Doc: "The IANA zone `schedule` is evaluated in (`UTC`, `Europe/Paris`); also the zone of a fired run's `date` param."},
	"concurrency":                    {Doc: "What a tick does while a run of the job is still open: `forbid` records the tick as skipped, `replace` cancels the open run (and cleans its sinks) then fires, `allow` runs both."},
	"catchup":                        {Allowed: "`none`, `latest`, `all`"},
	"duplicate_keys":                 {Allowed: "`fail`, `reject`"},
	"source":                         {Doc: "Where rows come from: exactly one of `parquet`, `postgres`, and the key column."},
	"source.parquet":                 {Doc: "A Parquet source."},
	"source.parquet.path":            {Doc: "A file, a directory or a glob of Parquet files; `{{.param}}` templates allowed (`data/users/dt={{.date}}`). Shards are planned from the files' metadata."},
	"source.postgres":                {Doc: "A Postgres source: an analyst's `SELECT`, run read-only, never edited (wrapped as a subquery with each shard's predicate)."},
	"source.postgres.dsn":            {Doc: "The connection string (`postgres://user@host:5432/db`); put it in the environment: `${SOURCE_DSN}`."},
	"source.postgres.query":          {Doc: "The `SELECT` producing the key column and the model's input columns; `{{.param}}` templates allowed."},
	"source.postgres.shard_by":       {Doc: "An integer column: shards are ranges of it, planned from its min, max and counts (an index on it keeps each shard's scan short). Absent: shards are ranges of a hash of the key."},
	"model":                          {Doc: "The ONNX model, where its inputs come from and where its outputs go."},
	"model.path":                     {Doc: "The `.onnx` file. `precog inspect` shows its inputs and outputs."},
	"model.version":                  {Doc: "The version stored with every record as `model_version`, and part of each run's version.", Default: "the first 12 hex digits of the file's SHA-256"},
	"model.inputs.<name>.columns":    {Doc: "Numeric columns stacked into `[N, len(columns)]` (or string columns into a `tensor(string)` input)."},
	"model.inputs.<name>.column":     {Doc: "One list or fixed-size-list column, into `[N, len]`."},
	"model.inputs.<name>.text":       {Default: "-"},
	"model.inputs.<name>.tokenizer":  {Doc: "The HuggingFace `tokenizer.json` of a `text` input (WordPiece or byte-level BPE)."},
	"model.inputs.<name>.max_length": {Doc: "Most tokens of a `text` input, `[CLS]` and `[SEP]` counted; longer texts are truncated.", Default: "512"},
	"model.inputs.<name>.mask_of":    {Doc: "This input is the attention mask of the named `text` input (1 on tokens, 0 on padding)."},
	"model.inputs.<name>.zeros_like": {Doc: "This input is zeros of the named `text` input's shape (`token_type_ids`)."},
	"model.threads":                  {Default: "0 (auto)"},
	"model.sessions":                 {Default: "0 (auto)"},
	"sinks":                          {Doc: "Where predictions go: any non-empty subset of `redis`, `postgres`, `parquet`. Every sink of a run is published together, or none is."},
	"sinks.redis":                    {Doc: "Records under `{namespace}:{version}:{key}`, published by setting `{namespace}:current` (see [contracts.md](contracts.md#contract-2-what-lands-where))."},
	"sinks.redis.addr":               {Doc: "`host:port` of the Redis server; `addr` or `addrs` is required. Put it in the environment: `${REDIS_ADDR}`."},
	"sinks.redis.namespace":          {Doc: "The key prefix, and the lookup API's namespace (`/v1/predictions/{namespace}/{key}`): `[A-Za-z0-9_.-]{1,128}`, `{{.param}}` templates allowed (checked after rendering)."},
	"sinks.redis.ttl":                {Doc: "Expiry of each record; at least 1m (shorter would expire records while the run writes). Absent or 0: no expiry."},
	"sinks.redis.username":           {Doc: "ACL user name; from the environment."},
	"sinks.redis.password":           {Doc: "Password; from the environment (`${REDIS_PASSWORD}`), never written in the file."},
	"sinks.redis.db":                 {Doc: "The database number."},
	"sinks.redis.tls":                {Doc: "Connect over TLS."},
	"sinks.redis.timeout":            {Doc: "Deadline of the sink's Redis operations."},
	"sinks.redis.encoding":           {Allowed: "`json`, `msgpack`"},
	"sinks.postgres":                 {Doc: "A table per run behind a view switched at publish (`replace`), or one table upserted per run params (`upsert`)."},
	"sinks.postgres.dsn":             {Doc: "The connection string; from the environment (`${DATABASE_URL}`)."},
	"sinks.postgres.table":           {Doc: "The view (replace) or table (upsert) readers query: `[a-z_][a-z0-9_]{0,50}`, not `precog_*`."},
	"sinks.parquet":                  {Doc: "One Parquet file per shard under `path`, published by a rename and a `_SUCCESS` file."},
	"sinks.parquet.path":             {Doc: "The output directory; `{{.param}}` templates allowed; may not be, contain or lie in the source path. A directory precog did not create is refused."},
	"retry":                          {Doc: "How often a shard is attempted."},
	"retry.max_attempts":             {Doc: "Attempts per shard before the run fails (resumable: rerunning retries only that shard)."},
	"serving":                        {Doc: "The lookup API's behaviour for this job's namespace; see [lookup-api.md](lookup-api.md#the-serving-block)."},
	"serving.features.dsn":           {Doc: "The connection string of the features table; from the environment."},
	"serving.features.table":         {Doc: "The table (schema-qualified allowed), keyed by `source.key`, with the columns the model's inputs name."},
	"checks":                         {Doc: "Checks against the published version before a publish; see [checks.md](checks.md)."},
	"checks.on_failure":              {Allowed: "`hold`, `fail`"},
	"checks.rows.min_ratio":          {Doc: "Least `rows_out` as a ratio of the published version's."},
	"checks.rows.max_ratio":          {Doc: "Most `rows_out` as a ratio of the published version's."},
	"checks.key_churn.max":           {Doc: "Largest share of published keys absent from the new version."},
}
