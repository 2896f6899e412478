package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/server/batch"
)

// Scenario is a validated scenario file: what server to load, with what
// payload and load, over which sweep, judged by which thresholds. Load and
// Parse make one from YAML (see scenarios/reference.yaml for every key);
// defaults are applied, so every field holds the value the run will use.
type Scenario struct {
	Name        string // names the run directory; default the file's base name
	Description string
	File        string // the file it was read from; "" when parsed from bytes
	Source      []byte // the file's text, verbatim

	// Targets are the base URLs of existing servers (all frontends of one
	// deployment: each point spreads its load over them). Empty when
	// Server is set.
	Targets []string
	// Model names the model on the targets for the v2 endpoint; when
	// empty it is asked from the first target's /readyz.
	Model string
	// AdminTokenEnv names the environment variable that holds the
	// targets' admin token (target.admin_token_env), for sweeps that set
	// batching settings through PATCH /admin/batching; "" when unset.
	AdminTokenEnv string
	// Server, when set, has infer start `infer serve` for each distinct
	// server configuration of the sweep.
	Server *ServerSpec

	Payload Payload
	Load    Load
	Sweep   Sweep
	SLO     SLO
}

// ServerSpec is how infer starts the server under test.
type ServerSpec struct {
	Model string // --model
	// Flags are the `infer serve` flags that every point shares, from the
	// scenario's model settings and args.
	Flags []string
	// ReadyTimeout bounds the wait for /readyz after a start. Default 2m.
	ReadyTimeout time.Duration
}

// Payload is what each request carries.
type Payload struct {
	Items  []string // the corpus: a built-in one or a file's lines, with Inject applied
	Corpus string   // "builtin", "mixed" or the file's path as written
	N      int      // items per request. Default 1.
	Format string   // "json" (default) or "text"; the v2 endpoint always sends v2 JSON
	// Inject, when set, appends a text to every Every-th item of the
	// corpus (for fault injection, like infer serve --sim-fail-on); the
	// requests that carry it are counted apart (record.Injected).
	Inject *Inject
}

// Inject is payload.inject: Text is appended, after a space, to items
// Every-1, 2·Every-1, … of the corpus.
type Inject struct {
	Text  string
	Every int
}

// Load is how the generator drives each point. Exactly one of Concurrency
// (closed loop) and Rates (open loop) is set; each value is one load level
// of the sweep.
type Load struct {
	Concurrency []int     // closed loop: clients, each sending its next request when the last is answered
	Rates       []float64 // open loop: requests per second, sent on schedule whatever the answers
	// PerWorker scales each level (rate, ramp start, clients) by the
	// point's sweep.workers (1 when the sweep leaves workers to the server,
	// and for the naive endpoint), so that levels are shares of each
	// configuration's capacity.
	PerWorker bool
	// Pacer is "constant" (default) or "ramp": a linear ramp from RampFrom
	// to the level's rate over the measured duration (warm-up runs at
	// RampFrom).
	Pacer    string
	RampFrom float64
	// MaxInFlight bounds outstanding requests in open loop; when the
	// server is slower than the rate, sending falls behind and the point
	// is flagged. Default 1000.
	MaxInFlight int
	Warmup      time.Duration // before each repeat, not recorded. Default 2s.
	Duration    time.Duration // measured, per repeat. Default 10s.
	Repeats     int           // default 1
	Timeout     time.Duration // per request. Default 30s.
}

// Open reports whether the load is open loop.
func (l Load) Open() bool { return len(l.Rates) > 0 }

// Sweep lists the values each dimension takes; points are their product.
// A server dimension left empty is not passed to infer serve, which then
// uses its own default. Batch, Workers, MaxLatency and Policy reach
// existing targets through their admin API; Buckets only servers infer
// starts.
type Sweep struct {
	Endpoints  []string // "naive", "batched", "v2", or a URL path. Default [batched].
	Batch      []int
	Workers    []int
	MaxLatency []time.Duration
	Policy     []string
	Buckets    [][]int // --buckets bounds; an empty list: no buckets
}

// adminKeys names the sweep keys set that the admin API applies.
func (s Sweep) adminKeys() []string {
	var keys []string
	for _, d := range []struct {
		name string
		n    int
	}{{"batch", len(s.Batch)}, {"workers", len(s.Workers)}, {"max_latency", len(s.MaxLatency)}, {"policy", len(s.Policy)}} {
		if d.n > 0 {
			keys = append(keys, d.name)
		}
	}
	return keys
}

// SLO thresholds, checked on every point; a zero field is not checked.
type SLO struct {
	P99           time.Duration
	MaxErrorRate  float64
	MinThroughput float64 // successful requests per second
	// Require is "all" (default): every point must pass; or "any": at
	// least one point must pass (the question a sweep asks: does some
	// configuration meet the SLO?).
	Require string
}

// Record returns the thresholds in the results' schema.
func (s SLO) Record() record.SLO {
	return record.SLO{P99: record.Duration(s.P99), MaxErrorRate: s.MaxErrorRate, MinThroughput: s.MinThroughput}
}

// Load defaults.
const (
	DefaultWarmup       = 2 * time.Second
	DefaultDuration     = 10 * time.Second
	DefaultTimeout      = 30 * time.Second
	DefaultMaxInFlight  = 1000
	DefaultReadyTimeout = 2 * time.Minute
)

// ScenarioError is a problem in a scenario file, at a line when known.
type ScenarioError struct {
	File   string // "" when parsed from bytes
	Line   int    // from 1; 0 when unknown
	Column int
	Msg    string
}

func (e *ScenarioError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
	} else {
		b.WriteString("scenario")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// LoadFile reads and validates the scenario at path. A corpus file it names
// is read relative to the scenario's directory. Every problem is a
// *ScenarioError (several are joined).
func LoadFile(path string) (*Scenario, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, &ScenarioError{File: path, Msg: fmt.Sprintf("cannot read: %v", unwrapPath(err))}
	}
	return Parse(path, filepath.Dir(path), src)
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// The file's shape. Durations are read as text and parsed by validate, so
// that a bad one is reported at its line.
type (
	fileScenario struct {
		Name        string       `yaml:"name"`
		Description string       `yaml:"description"`
		Target      *fileTarget  `yaml:"target"`
		Server      *fileServer  `yaml:"server"`
		Payload     *filePayload `yaml:"payload"`
		Load        *fileLoad    `yaml:"load"`
		Sweep       *fileSweep   `yaml:"sweep"`
		SLO         *fileSLO     `yaml:"slo"`
	}
	fileTarget struct {
		URLs          list[string] `yaml:"urls"`
		Model         string       `yaml:"model"`
		AdminTokenEnv string       `yaml:"admin_token_env"`
	}
	fileServer struct {
		Model        string   `yaml:"model"`
		SimFixed     *string  `yaml:"sim_fixed"`
		SimPerItem   *string  `yaml:"sim_per_item"`
		SimFailOn    string   `yaml:"sim_fail_on"`
		Devices      string   `yaml:"devices"`
		QueueCap     *int     `yaml:"queue_cap"`
		Timeout      *string  `yaml:"timeout"`
		Args         []string `yaml:"args"`
		ReadyTimeout *string  `yaml:"ready_timeout"`
	}
	filePayload struct {
		Corpus string      `yaml:"corpus"`
		Items  *int        `yaml:"items"`
		Format string      `yaml:"format"`
		Inject *fileInject `yaml:"inject"`
	}
	fileInject struct {
		Text  string `yaml:"text"`
		Every int    `yaml:"every"`
	}
	fileLoad struct {
		Concurrency list[int]     `yaml:"concurrency"`
		Rate        list[float64] `yaml:"rate"`
		Pacer       string        `yaml:"pacer"`
		RampFrom    *float64      `yaml:"ramp_from"`
		MaxInFlight *int          `yaml:"max_in_flight"`
		PerWorker   bool          `yaml:"per_worker"`
		Warmup      *string       `yaml:"warmup"`
		Duration    *string       `yaml:"duration"`
		Repeats     *int          `yaml:"repeats"`
		Timeout     *string       `yaml:"timeout"`
	}
	fileSweep struct {
		Endpoints  list[string] `yaml:"endpoints"`
		Batch      list[int]    `yaml:"batch"`
		Workers    list[int]    `yaml:"workers"`
		MaxLatency list[string] `yaml:"max_latency"`
		Policy     list[string] `yaml:"policy"`
		Buckets    list[[]int]  `yaml:"buckets"`
	}
	fileSLO struct {
		P99           *string  `yaml:"p99"`
		MaxErrorRate  *float64 `yaml:"max_error_rate"`
		MinThroughput *float64 `yaml:"min_throughput"`
		Require       string   `yaml:"require"`
	}
)

// list is a YAML sequence that also accepts a single value.
type list[T any] []T

func (l *list[T]) UnmarshalYAML(unmarshal func(any) error) error {
	var one T
	if err := unmarshal(&one); err == nil {
		*l = list[T]{one}
		return nil
	}
	var many []T
	if err := unmarshal(&many); err != nil {
		return err
	}
	*l = many
	return nil
}

// Parse validates a scenario held in memory; name labels its errors, and a
// corpus file is read relative to dir.
func Parse(name, dir string, src []byte) (*Scenario, error) {
	f, err := parser.ParseBytes(src, 0)
	if err != nil {
		return nil, yamlError(name, err)
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, &ScenarioError{File: name, Msg: fmt.Sprintf("want one YAML document holding a mapping, got %d documents", len(f.Docs))}
	}
	var fs fileScenario
	dec := yaml.NewDecoder(bytes.NewReader(nil), yaml.DisallowUnknownField())
	if err := dec.DecodeFromNode(f.Docs[0].Body, &fs); err != nil {
		return nil, yamlError(name, err)
	}
	v := &validator{file: name, ast: f}
	sc := v.scenario(&fs, dir)
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	sc.File = name
	sc.Source = src
	if sc.Name == "" {
		base := filepath.Base(name)
		sc.Name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	return sc, nil
}

// yamlError turns a decoding error into a *ScenarioError at its token.
func yamlError(file string, err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		pos := ye.GetToken().Position
		msg := ye.GetMessage()
		var uf *yaml.UnknownFieldError
		if errors.As(err, &uf) {
			if s := suggest(ye.GetToken().Value); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		return &ScenarioError{File: file, Line: pos.Line, Column: pos.Column, Msg: msg}
	}
	return &ScenarioError{File: file, Msg: err.Error()}
}

// suggest returns the known key closest to key, if it is a likely typo.
func suggest(key string) string {
	best, bestD := "", 3
	for _, k := range knownKeys() {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func knownKeys() []string {
	var keys []string
	for _, v := range []any{fileScenario{}, fileTarget{}, fileServer{}, filePayload{}, fileInject{}, fileLoad{}, fileSweep{}, fileSLO{}} {
		keys = append(keys, yamlTags(v)...)
	}
	return keys
}

// yamlTags returns the YAML keys of struct v's fields.
func yamlTags(v any) []string {
	t := reflect.TypeOf(v)
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// validator checks a decoded file, collecting errors at their lines.
type validator struct {
	file string
	ast  *ast.File
	errs []error
}

// errorf records a problem with the value at path (like "$.load.rate[1]";
// the line is that of the key or element, or of its nearest parent that
// exists).
func (v *validator) errorf(path, format string, args ...any) {
	e := &ScenarioError{File: v.file, Msg: fmt.Sprintf(format, args...)}
	for p := path; p != "$" && p != ""; p = parentPath(p) {
		if tok := find(v.ast.Docs[0].Body, p); tok != nil {
			e.Line, e.Column = tok.Position.Line, tok.Position.Column
			break
		}
	}
	v.errs = append(v.errs, e)
}

// find returns the token of the key or element at path, or nil.
func find(n ast.Node, path string) *token.Token {
	var tok *token.Token
	rest := strings.TrimPrefix(path, "$")
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "."):
			name := rest[1:]
			if i := strings.IndexAny(name, ".["); i >= 0 {
				name = name[:i]
			}
			rest = rest[1+len(name):]
			var entries []*ast.MappingValueNode
			switch m := n.(type) {
			case *ast.MappingNode:
				entries = m.Values
			case *ast.MappingValueNode:
				entries = []*ast.MappingValueNode{m}
			}
			n = nil
			for _, e := range entries {
				if e.Key.GetToken().Value == name {
					n, tok = e.Value, e.Key.GetToken()
				}
			}
		case strings.HasPrefix(rest, "["):
			end := strings.IndexByte(rest, ']')
			i, err := strconv.Atoi(rest[1:max(end, 1)])
			seq, ok := n.(*ast.SequenceNode)
			if end < 0 || err != nil || !ok || i >= len(seq.Values) {
				return nil
			}
			rest = rest[end+1:]
			n, tok = seq.Values[i], seq.Values[i].GetToken()
		default:
			return nil
		}
		if n == nil {
			return nil
		}
	}
	return tok
}

func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i > 0 {
		return p[:i]
	}
	return "$"
}

// key renders a YAML path as the key a user wrote: "$.load.rate[1]" → "load.rate[1]".
func key(path string) string { return strings.TrimPrefix(path, "$.") }

func (v *validator) duration(path string, s *string, def time.Duration, positive bool) time.Duration {
	if s == nil {
		return def
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		v.errorf(path, "%s %q: want a duration like 10s or 250ms", key(path), *s)
	case positive && d <= 0:
		v.errorf(path, "%s %v: must be positive", key(path), d)
	case d < 0:
		v.errorf(path, "%s %v: must not be negative", key(path), d)
	}
	return d
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (v *validator) scenario(fs *fileScenario, dir string) *Scenario {
	sc := &Scenario{Name: fs.Name, Description: fs.Description}
	if fs.Name != "" && !nameRE.MatchString(fs.Name) {
		v.errorf("$.name", "name %q: use letters, digits, '.', '_' and '-' (it names the run directory)", fs.Name)
	}
	switch {
	case fs.Target != nil && fs.Server != nil:
		v.errorf("$.target", "both target and server: a scenario loads existing servers (target) or servers infer starts (server), not both")
	case fs.Target == nil && fs.Server == nil:
		v.errorf("$", "no target or server: say which server to load (target: urls) or which infer serve to start (server: model)")
	case fs.Target != nil:
		sc.Targets, sc.Model, sc.AdminTokenEnv = v.target(fs.Target)
	default:
		sc.Server = v.server(fs.Server, fs.Sweep != nil && len(fs.Sweep.Buckets) > 0)
	}
	sc.Payload = v.payload(fs.Payload, dir)
	sc.Load = v.load(fs.Load)
	sc.Sweep = v.sweep(fs.Sweep, sc.Server != nil)
	sc.SLO = v.slo(fs.SLO)
	if sc.Payload.Format == "text" && slices.Contains(sc.Sweep.Endpoints, "v2") {
		v.errorf("$.payload.format", "payload.format text cannot be sent to the v2 endpoint, which takes v2 JSON")
	}
	return sc
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (v *validator) target(t *fileTarget) (urls []string, model, tokenEnv string) {
	if len(t.URLs) == 0 {
		v.errorf("$.target", "target.urls: want at least one URL, like http://127.0.0.1:8080")
	}
	urls = make([]string, 0, len(t.URLs))
	for i, s := range t.URLs {
		if err := checkBaseURL(s); err != nil {
			v.errorf(fmt.Sprintf("$.target.urls[%d]", i), "target.urls[%d]: %v", i, err)
		}
		urls = append(urls, strings.TrimSuffix(s, "/"))
	}
	if t.AdminTokenEnv != "" && !envNameRE.MatchString(t.AdminTokenEnv) {
		v.errorf("$.target.admin_token_env", "target.admin_token_env %q: name an environment variable (like INFER_ADMIN_TOKEN) that holds the token, not the token itself", t.AdminTokenEnv)
	}
	return urls, t.Model, t.AdminTokenEnv
}

// checkBaseURL accepts http(s)://host[:port][/prefix].
func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// URL", s)
	case u.Host == "":
		return fmt.Errorf("%q: no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q: a base URL has no query or fragment", s)
	}
	return nil
}

// server validates the server section; bucketSweep tells that the sweep
// sets --buckets.
func (v *validator) server(s *fileServer, bucketSweep bool) *ServerSpec {
	spec := &ServerSpec{Model: s.Model}
	if s.Model == "" {
		v.errorf("$.server", "server.model: name the model to serve (sim, a built-in name such as bert-mini, or an .onnx path)")
	}
	spec.Flags = []string{"--model", s.Model}
	for _, d := range []struct {
		path, flag string
		val        *string
	}{{"$.server.sim_fixed", "--sim-fixed", s.SimFixed}, {"$.server.sim_per_item", "--sim-per-item", s.SimPerItem}} {
		if d.val == nil {
			continue
		}
		if s.Model != "sim" {
			v.errorf(d.path, "%s applies to model sim only, not %q", key(d.path), s.Model)
		}
		spec.Flags = append(spec.Flags, d.flag, v.duration(d.path, d.val, 0, false).String())
	}
	if s.SimFailOn != "" {
		if s.Model != "sim" {
			v.errorf("$.server.sim_fail_on", "server.sim_fail_on applies to model sim only, not %q", s.Model)
		}
		spec.Flags = append(spec.Flags, "--sim-fail-on", s.SimFailOn)
	}
	if s.Devices != "" {
		spec.Flags = append(spec.Flags, "--devices", s.Devices)
	}
	if s.QueueCap != nil {
		if *s.QueueCap < 1 {
			v.errorf("$.server.queue_cap", "server.queue_cap %d: must be at least 1", *s.QueueCap)
		}
		spec.Flags = append(spec.Flags, "--queue-cap", strconv.Itoa(*s.QueueCap))
	}
	if s.Timeout != nil {
		spec.Flags = append(spec.Flags, "--timeout", v.duration("$.server.timeout", s.Timeout, 0, true).String())
	}
	set := []string{"--addr", "--batch", "--workers", "--max-latency", "--policy", "--model"}
	if bucketSweep {
		set = append(set, "--buckets")
	}
	for i, a := range s.Args {
		for _, f := range set {
			if a == f || strings.HasPrefix(a, f+"=") {
				v.errorf(fmt.Sprintf("$.server.args[%d]", i), "server.args: %s is set by infer bench (use the sweep or server.model)", f)
			}
		}
	}
	spec.Flags = append(spec.Flags, s.Args...)
	spec.ReadyTimeout = v.duration("$.server.ready_timeout", s.ReadyTimeout, DefaultReadyTimeout, true)
	return spec
}

func (v *validator) payload(p *filePayload, dir string) Payload {
	if p == nil {
		p = &filePayload{}
	}
	out := Payload{Corpus: p.Corpus, N: 1, Format: p.Format}
	if p.Items != nil {
		out.N = *p.Items
		if out.N < 1 || out.N > 4096 {
			v.errorf("$.payload.items", "payload.items %d: want 1 to 4096 items per request", out.N)
		}
	}
	switch p.Format {
	case "":
		out.Format = "json"
	case "json":
	case "text":
		if out.N != 1 {
			v.errorf("$.payload.format", "payload.format text sends one item per request; payload.items is %d", out.N)
		}
	default:
		v.errorf("$.payload.format", "payload.format %q: want json or text", p.Format)
	}
	switch p.Corpus {
	case "", "builtin":
		out.Corpus = "builtin"
		out.Items = corpus.Masked()
	case "mixed":
		out.Items = corpus.Mixed()
	default:
		path := p.Corpus
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		items, err := corpus.Load(path)
		if err != nil {
			v.errorf("$.payload.corpus", "payload.corpus: %v", err)
		}
		out.Items = items
	}
	if in := p.Inject; in != nil {
		switch {
		case in.Text == "":
			v.errorf("$.payload.inject", "payload.inject.text: name the text to inject, like poison")
		case in.Every < 1:
			v.errorf("$.payload.inject", "payload.inject.every %d: want 1 or more (every how many items carries the text)", in.Every)
		default:
			out.Inject = &Inject{Text: in.Text, Every: in.Every}
			out.Items = out.Inject.apply(out.Items)
		}
	}
	return out
}

// apply returns a copy of items with the text appended to every Every-th.
func (in *Inject) apply(items []string) []string {
	out := slices.Clone(items)
	for i := in.Every - 1; i < len(out); i += in.Every {
		out[i] += " " + in.Text
	}
	return out
}

func (v *validator) load(l *fileLoad) Load {
	if l == nil {
		v.errorf("$", "no load: say how to drive the server (load: concurrency or load: rate)")
		return Load{}
	}
	out := Load{
		Concurrency: l.Concurrency,
		Rates:       l.Rate,
		Pacer:       l.Pacer,
		PerWorker:   l.PerWorker,
		MaxInFlight: DefaultMaxInFlight,
		Repeats:     1,
	}
	switch {
	case len(l.Concurrency) > 0 && len(l.Rate) > 0:
		v.errorf("$.load.rate", "load has both concurrency (closed loop) and rate (open loop); choose one")
	case len(l.Concurrency) == 0 && len(l.Rate) == 0:
		v.errorf("$.load", "load: set concurrency (closed loop: clients) or rate (open loop: requests per second)")
	}
	for i, c := range l.Concurrency {
		if c < 1 || c > 100000 {
			v.errorf(fmt.Sprintf("$.load.concurrency[%d]", i), "load.concurrency %d: want 1 to 100000 clients", c)
		}
	}
	for i, r := range l.Rate {
		if !(r > 0) || math.IsInf(r, 0) || r > 1e6 {
			v.errorf(fmt.Sprintf("$.load.rate[%d]", i), "load.rate %v: want a positive rate in requests per second, at most 1e6", r)
		}
	}
	switch l.Pacer {
	case "":
		out.Pacer = "constant"
	case "constant":
	case "ramp":
		if len(l.Rate) == 0 {
			v.errorf("$.load.pacer", "load.pacer ramp needs load.rate (the ramp's end)")
		}
	default:
		v.errorf("$.load.pacer", "load.pacer %q: want constant or ramp", l.Pacer)
	}
	if l.RampFrom != nil {
		out.RampFrom = *l.RampFrom
		switch {
		case out.Pacer != "ramp":
			v.errorf("$.load.ramp_from", "load.ramp_from applies to pacer ramp only")
		case !(out.RampFrom > 0):
			v.errorf("$.load.ramp_from", "load.ramp_from %v: want a positive rate", out.RampFrom)
		}
	} else if out.Pacer == "ramp" {
		v.errorf("$.load.pacer", "load.pacer ramp needs load.ramp_from (the starting rate)")
	}
	if l.MaxInFlight != nil {
		out.MaxInFlight = *l.MaxInFlight
		switch {
		case len(l.Rate) == 0:
			v.errorf("$.load.max_in_flight", "load.max_in_flight applies to open loop (rate) only; in closed loop concurrency bounds it")
		case out.MaxInFlight < 1 || out.MaxInFlight > 100000:
			v.errorf("$.load.max_in_flight", "load.max_in_flight %d: want 1 to 100000", out.MaxInFlight)
		}
	}
	out.Warmup = v.duration("$.load.warmup", l.Warmup, DefaultWarmup, false)
	out.Duration = v.duration("$.load.duration", l.Duration, DefaultDuration, true)
	out.Timeout = v.duration("$.load.timeout", l.Timeout, DefaultTimeout, true)
	if l.Repeats != nil {
		out.Repeats = *l.Repeats
		if out.Repeats < 1 || out.Repeats > 100 {
			v.errorf("$.load.repeats", "load.repeats %d: want 1 to 100", out.Repeats)
		}
	}
	return out
}

func (v *validator) sweep(s *fileSweep, server bool) Sweep {
	if s == nil {
		s = &fileSweep{}
	}
	out := Sweep{Endpoints: s.Endpoints, Batch: s.Batch, Workers: s.Workers, Policy: s.Policy, Buckets: s.Buckets}
	if len(out.Endpoints) == 0 {
		out.Endpoints = []string{"batched"}
	}
	for i, e := range s.Endpoints {
		switch {
		case e == "naive" || e == "batched" || e == "v2":
		case strings.HasPrefix(e, "/"):
			if _, err := url.ParseRequestURI(e); err != nil {
				v.errorf(fmt.Sprintf("$.sweep.endpoints[%d]", i), "sweep.endpoints[%d] %q: not a URL path", i, e)
			}
		default:
			v.errorf(fmt.Sprintf("$.sweep.endpoints[%d]", i), "sweep.endpoints[%d] %q: want naive, batched, v2 or a path like /predict", i, e)
		}
	}
	if !server && len(s.Buckets) > 0 {
		v.errorf("$.sweep.buckets", "sweep.buckets: the admin API cannot set a target's buckets; sweep them with a server: section, which infer starts with --buckets")
	}
	for i, bs := range s.Buckets {
		if err := checkBuckets(bs); err != nil {
			v.errorf(fmt.Sprintf("$.sweep.buckets[%d]", i), "sweep.buckets[%d]: %v", i, err)
		}
	}
	for i, b := range s.Batch {
		if b < 1 {
			v.errorf(fmt.Sprintf("$.sweep.batch[%d]", i), "sweep.batch %d: must be at least 1", b)
		}
	}
	for i, w := range s.Workers {
		if w < 1 || w > 1024 {
			v.errorf(fmt.Sprintf("$.sweep.workers[%d]", i), "sweep.workers %d: want 1 to 1024", w)
		}
	}
	for i, l := range s.MaxLatency {
		out.MaxLatency = append(out.MaxLatency, v.duration(fmt.Sprintf("$.sweep.max_latency[%d]", i), &l, 0, false))
	}
	for i, p := range s.Policy {
		if _, err := batch.ParsePolicy(p); err != nil {
			v.errorf(fmt.Sprintf("$.sweep.policy[%d]", i), "sweep.policy: %v", err)
		}
	}
	return out
}

func (v *validator) slo(s *fileSLO) SLO {
	if s == nil {
		return SLO{Require: "all"}
	}
	out := SLO{Require: s.Require}
	out.P99 = v.duration("$.slo.p99", s.P99, 0, true)
	if s.MaxErrorRate != nil {
		out.MaxErrorRate = *s.MaxErrorRate
		if out.MaxErrorRate < 0 || out.MaxErrorRate > 1 {
			v.errorf("$.slo.max_error_rate", "slo.max_error_rate %v: want a fraction from 0 to 1 (0.01 = 1 %%)", out.MaxErrorRate)
		}
	}
	if s.MinThroughput != nil {
		out.MinThroughput = *s.MinThroughput
		if out.MinThroughput < 0 {
			v.errorf("$.slo.min_throughput", "slo.min_throughput %v: must not be negative", out.MinThroughput)
		}
	}
	switch s.Require {
	case "":
		out.Require = "all"
	case "all", "any":
	default:
		v.errorf("$.slo.require", "slo.require %q: want all (every point passes) or any (some point passes)", s.Require)
	}
	return out
}

// checkBuckets accepts positive, increasing bucket bounds (or none).
func checkBuckets(bs []int) error {
	for i, b := range bs {
		if b < 1 || (i > 0 && b <= bs[i-1]) {
			return fmt.Errorf("%v: want positive, increasing token-length bounds like [16, 32, 64], or [] for none", bs)
		}
	}
	return nil
}

// WithTargets returns a copy of s that loads the servers at urls instead of
// what the file says. The sweep's batch, workers, max_latency and policy
// then go through the targets' admin API; a sweep of buckets, which it
// cannot set, is an error.
func (s *Scenario) WithTargets(urls []string) (*Scenario, error) {
	for _, u := range urls {
		if err := checkBaseURL(u); err != nil {
			return nil, fmt.Errorf("--target: %w", err)
		}
	}
	if len(s.Sweep.Buckets) > 0 {
		return nil, errors.New("--target: the scenario sweeps buckets, which the admin API cannot set on a target; run it with its server section")
	}
	c := *s
	c.Targets = make([]string, len(urls))
	for i, u := range urls {
		c.Targets[i] = strings.TrimSuffix(u, "/")
	}
	c.Server = nil
	return &c, nil
}
