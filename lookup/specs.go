package lookup

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/precog-ml/precog/jobs"
)

// servingPlaceholder renders the templates of run parameters a served spec
// was not given. It may only land in batch-only fields (source paths and
// queries, the Parquet sink's path), which serving never reads: the
// published version in Redis tells the API what to read. A served field
// that needs a parameter not given is refused (servedFieldsFilled).
const servingPlaceholder = "unset-when-serving"

// templateParamRE finds the {{.name}} references of a spec's text.
var templateParamRE = regexp.MustCompile(`\{\{-?\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}`)

// LoadServingSpec loads a job spec for serving. params are optional: a
// template naming a param not given (e.g. source.parquet.path's {{.date}})
// is rendered with a placeholder, since it only matters to a batch run. Any
// other problem of the spec fails as jobs.Load reports it. The returned
// spec's Params are the given params only.
func LoadServingSpec(path string, params map[string]string) (*jobs.Spec, error) {
	spec, err := jobs.Load(path, params)
	if err == nil {
		return spec, nil
	}
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return nil, err
	}
	filled := maps.Clone(params)
	if filled == nil {
		filled = map[string]string{}
	}
	missing := false
	for _, m := range templateParamRE.FindAllSubmatch(data, -1) {
		if _, ok := filled[string(m[1])]; !ok {
			filled[string(m[1])] = servingPlaceholder
			missing = true
		}
	}
	if !missing {
		return nil, err
	}
	spec, err = jobs.Load(path, filled)
	if err != nil {
		return nil, err
	}
	if err := servedFieldsFilled(path, spec, filled, params); err != nil {
		return nil, err
	}
	spec.Params = maps.Clone(params)
	return spec, nil
}

// servedFieldsFilled refuses a spec whose served fields (what the API
// reads: the Redis namespace and server, the Postgres table, the features
// table, the model) use a run parameter serving was not given. Rendered
// with the placeholder, the API would serve a namespace no run writes
// (iris-bf-unset-when-serving) and /readyz would call it ready. A job with
// one namespace per partition (a backfill's iris-bf-{{.date}}) is served
// one partition per server: --param date=2026-11-03.
func servedFieldsFilled(path string, spec *jobs.Spec, filled, given map[string]string) error {
	var unset []string
	for name, v := range filled {
		if _, ok := given[name]; !ok && v == servingPlaceholder {
			unset = append(unset, name)
		}
	}
	sort.Strings(unset)
	for _, f := range servedFields(spec) {
		if !strings.Contains(f.value, servingPlaceholder) {
			continue
		}
		hint := make([]string, len(unset))
		for i, name := range unset {
			hint[i] = "--param " + name + "=VALUE"
		}
		return fmt.Errorf("%s: %s uses a run parameter serving was not given (%s): the API cannot tell which value to serve; serve one value with %s (one server per value), or give %s a fixed value",
			path, f.name, strings.Join(unset, ", "), strings.Join(hint, " "), f.name)
	}
	return nil
}

// servedField is a spec field the lookup API reads.
type servedField struct{ name, value string }

func servedFields(spec *jobs.Spec) []servedField {
	fs := []servedField{{"model.path", spec.Model.Path}, {"model.version", spec.Model.Version}}
	if r := spec.Sinks.Redis; r != nil {
		fs = append(fs, servedField{"sinks.redis.namespace", r.Namespace}, servedField{"sinks.redis.addr", r.Addr})
		for _, a := range r.Addrs {
			fs = append(fs, servedField{"sinks.redis.addrs", a})
		}
	}
	if p := spec.Sinks.Postgres; p != nil {
		fs = append(fs, servedField{"sinks.postgres.dsn", p.DSN}, servedField{"sinks.postgres.schema", p.Schema}, servedField{"sinks.postgres.table", p.Table})
	}
	if f := spec.Serving.Features; f != nil {
		fs = append(fs, servedField{"serving.features.dsn", f.DSN}, servedField{"serving.features.table", f.Table})
	}
	return fs
}

// loadSpecs loads every *.yaml / *.yml of dir for serving, in name order.
func loadSpecs(dir string, params map[string]string) ([]*jobs.Spec, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lookup: jobs dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var specs []*jobs.Spec
	for _, name := range names {
		spec, err := LoadServingSpec(filepath.Join(dir, name), params)
		if err != nil {
			return nil, fmt.Errorf("lookup: %w", err)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}
