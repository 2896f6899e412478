package scenario

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Quick is a one-command bench (infer bench --target URL …): one or more
// running servers, one API, one list of load levels. YAML writes it as the
// scenario file it stands for, so that a quick bench and that file are one
// scenario, parsed by the same code, and the file is the next step.
type Quick struct {
	Targets []string // base URLs; with API "http", a path in the URL is the endpoint
	// API: "completions" or "chat" (OpenAI-compatible, streamed), or
	// "http" (POST bodies of the payload's corpus). Default completions.
	API         string
	Model       string        // the model's name in requests; "" asks the server
	Rates       []float64     // open loop, requests/s; or
	Concurrency []int         // closed loop, clients (default [8] when neither)
	Duration    time.Duration // measured window per level; 0: DefaultDuration
	Warmup      time.Duration // Warmup < 0: DefaultWarmup
	Prompts     string        // LLM: a JSONL or ShareGPT prompt file
	Corpus      string        // http: a file of request items, one a line
}

// APIs are the values of Quick.API.
var APIs = []string{"completions", "chat", "http"}

// QuickName is the name of a quick bench's scenario, and of its runs.
const QuickName = "bench"

// YAML returns the scenario file q stands for. Files named in q are
// written as given: read relative to the directory the file is parsed in.
func (q Quick) YAML() ([]byte, error) {
	api := q.API
	if api == "" {
		api = "completions"
	}
	if !strings.Contains(" "+strings.Join(APIs, " ")+" ", " "+api+" ") {
		return nil, fmt.Errorf("--api %q: want %s", api, strings.Join(APIs, ", "))
	}
	if len(q.Targets) == 0 {
		return nil, errors.New("--target: name the server to load, like --target http://127.0.0.1:8000")
	}
	if len(q.Rates) > 0 && len(q.Concurrency) > 0 {
		return nil, errors.New("--rate and --concurrency: give one (an open loop at rates, or a closed loop of clients)")
	}
	llm := api != "http"
	switch {
	case llm && q.Corpus != "":
		return nil, fmt.Errorf("--corpus is for --api http; --api %s takes --prompts", api)
	case !llm && q.Prompts != "":
		return nil, errors.New("--prompts is for --api completions or chat; --api http takes --corpus")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", QuickName)
	fmt.Fprintf(&b, "description: infer bench --target %s --api %s\n", strings.Join(q.Targets, ","), api)
	b.WriteString("target:\n  urls:\n")
	endpoint := ""
	for _, t := range q.Targets {
		base, path, err := splitTarget(t, llm)
		if err != nil {
			return nil, err
		}
		switch {
		case endpoint == "":
			endpoint = path
		case path != endpoint:
			return nil, fmt.Errorf("--target: %s and %s load different paths (%s and %s): give one", q.Targets[0], t, endpoint, path)
		}
		fmt.Fprintf(&b, "    - %s\n", quote(base))
	}
	if q.Model != "" {
		fmt.Fprintf(&b, "  model: %s\n", quote(q.Model))
	}
	b.WriteString("payload:\n")
	if llm {
		fmt.Fprintf(&b, "  api: %s\n", api)
		if q.Prompts != "" {
			fmt.Fprintf(&b, "  prompts: %s\n", quote(q.Prompts))
		}
	} else if q.Corpus != "" {
		fmt.Fprintf(&b, "  corpus: %s\n", quote(q.Corpus))
	} else {
		b.WriteString("  corpus: builtin\n")
	}
	b.WriteString("load:\n")
	switch {
	case len(q.Rates) > 0:
		fmt.Fprintf(&b, "  rate: [%s]\n", join(q.Rates, func(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }))
		if llm {
			b.WriteString("  arrival: poisson\n")
		}
	case len(q.Concurrency) > 0:
		fmt.Fprintf(&b, "  concurrency: [%s]\n", join(q.Concurrency, strconv.Itoa))
	default:
		b.WriteString("  concurrency: [8]\n")
	}
	warmup, duration := q.Warmup, q.Duration
	if warmup < 0 {
		warmup = DefaultWarmup
	}
	if duration == 0 {
		duration = DefaultDuration
	}
	fmt.Fprintf(&b, "  warmup: %v\n  duration: %v\n", warmup, duration)
	if endpoint != "" {
		fmt.Fprintf(&b, "sweep:\n  endpoints: [%s]\n", quote(endpoint))
	}
	return []byte(b.String()), nil
}

// splitTarget splits a quick target into the base URL and, for the http
// API, the path loaded ("" for none: infer's batched endpoint). An LLM
// target's trailing /v1 is dropped: the client adds /v1/completions.
func splitTarget(s string, llm bool) (base, path string, err error) {
	if err := checkBaseURL(s); err != nil {
		return "", "", fmt.Errorf("--target: %w", err)
	}
	s = strings.TrimSuffix(s, "/")
	if llm {
		return strings.TrimSuffix(s, "/v1"), "", nil
	}
	u, _ := url.Parse(s)
	if u.Path == "" {
		return s, "", nil
	}
	path = u.Path
	u.Path, u.RawPath = "", ""
	return u.String(), path, nil
}

// quote writes s as a YAML double-quoted string when it is not plain.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-", r))
	}) < 0 {
		return s
	}
	return strconv.Quote(s)
}

func join[T any](vs []T, f func(T) string) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = f(v)
	}
	return strings.Join(out, ", ")
}
