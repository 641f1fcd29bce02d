package dashboard

import (
	"fmt"
	"html/template"
	"net/url"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ts":    timeTag,
	"human": func(n int64) string { return fmt.Sprint(n) },
	"stateClass": func(s any) string {
		return "st-" + fmt.Sprint(s)
	},
	"pct":       func(p float64) string { return fmt.Sprintf("%.1f", p) },
	"rejectCap": func() int { return jobs.RejectSampleCap },
	"inc":       func(n int) int { return n + 1 },
}

// timeTag renders a time in UTC inside <time>; the page's script shows it
// in the viewer's zone and keeps UTC in the title (hover).
func timeTag(t time.Time) template.HTML {
	if t.IsZero() {
		return `<span class="muted">-</span>`
	}
	u := t.UTC()
	iso := u.Format(time.RFC3339)
	text := u.Format("2006-01-02 15:04:05") + " UTC"
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`, iso, text, text))
}

func urlq(s string) string { return url.QueryEscape(s) }
