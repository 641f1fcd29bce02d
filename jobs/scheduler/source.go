package scheduler

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/schedule"
)

// Dir is a directory of job specs (*.yaml, *.yml).
type Dir struct {
	Path string
	// Now renders templates when listing (a tick's params of now).
	Now func() time.Time
}

// Load is every spec of the directory, rendered with the params of a tick
// at now (date, scheduled_for) so that specs whose paths use {{.date}}
// load (or with params, when given); a bad file is an error naming it.
func (d Dir) Load(params map[string]string) ([]*jobs.Spec, []error) {
	files, err := d.read(params)
	if err != nil {
		return nil, []error{err}
	}
	var specs []*jobs.Spec
	var errs []error
	for _, f := range files {
		if f.Err != nil {
			errs = append(errs, f.Err)
			continue
		}
		specs = append(specs, f.Spec)
	}
	return specs, errs
}

// Read implements SpecSource: every spec file of the directory, rendered
// as Load does.
func (d Dir) Read() ([]SpecFile, error) { return d.read(nil) }

func (d Dir) read(params map[string]string) ([]SpecFile, error) {
	names, err := d.files()
	if err != nil {
		return nil, err
	}
	out := make([]SpecFile, 0, len(names))
	for _, f := range names {
		p := params
		if p == nil {
			p = schedule.Params(d.now(), time.UTC)
		}
		spec, err := jobs.Load(f, p)
		out = append(out, SpecFile{File: f, Spec: spec, Err: err})
	}
	return out, nil
}

// Render implements SpecSource: the spec is parsed again from the bytes it
// was loaded from (the file may have changed or gone since), with the
// environment of this process for its ${VAR}s.
func (d Dir) Render(spec *jobs.Spec, params map[string]string) (*jobs.Spec, error) {
	return jobs.Parse(spec.Raw, spec.File, params, os.LookupEnv)
}

func (d Dir) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d Dir) files() ([]string, error) {
	out, err := d.specFiles()
	if err != nil {
		return nil, fmt.Errorf("--jobs %s: %w", d.Path, err)
	}
	return out, nil
}

// specFiles lists the directory's spec files in name order.
func (d Dir) specFiles() ([]string, error) {
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			out = append(out, filepath.Join(d.Path, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// LoadForView loads every spec of the directory for a view (precog
// schedule list, the dashboard's jobs page) with jobs.LoadForView: a view
// never connects to a job's stores, so a sink's ${DATABASE_URL} need not be
// set and is never expanded into it. Templates get the params of a tick
// at now. dirErr is the directory's own error (unreadable); errs name the
// specs that do not load, the others are returned in name order.
func (d Dir) LoadForView(now time.Time) (specs []*jobs.Spec, errs []error, dirErr error) {
	names, err := d.specFiles()
	if err != nil {
		return nil, nil, err
	}
	for _, f := range names {
		spec, err := jobs.LoadForView(f, schedule.Params(now, time.UTC))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		specs = append(specs, spec)
	}
	return specs, errs, nil
}

// Stamp is a cheap fingerprint of the directory (names, sizes, mtimes): a
// change means the specs should be reloaded.
func (d Dir) Stamp() string {
	names, err := d.files()
	if err != nil {
		return "error: " + err.Error()
	}
	s := ""
	for _, f := range names {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return s
}
