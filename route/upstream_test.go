package route

import (
	"strings"
	"testing"
	"time"
)

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: the upstream as String prints it, or an error's fragment
		dns      bool
		weight   int
	}{
		{"http://127.0.0.1:8081", "http://127.0.0.1:8081", false, 1},
		{"http://127.0.0.1:8081/", "http://127.0.0.1:8081", false, 1},
		{"https://vllm.example:443;w=3", "https://vllm.example:443;w=3", false, 3},
		{" http://[::1]:9000 ; w=2", "http://[::1]:9000;w=2", false, 2},
		{"dns://vllm-headless.default.svc:8000", "dns://vllm-headless.default.svc:8000", true, 1},
		{"dns://replicas:8000;w=100", "dns://replicas:8000;w=100", true, 100},
		{"http://a:1;w=0", "weight \"0\"", false, 0},
		{"http://a:1;w=101", "weight \"101\"", false, 0},
		{"http://a:1;w=x", "weight \"x\"", false, 0},
		{"http://a:1;weight=2", "unknown parameter", false, 0},
		{"ftp://a:1", `scheme "ftp"`, false, 0},
		{"127.0.0.1:8081", "want a URL", false, 0},
		{"localhost", "want a URL", false, 0},
		{"http://", "want a URL", false, 0},
		{"dns://name", "needs a port", false, 0},
		{"http://a:1/v1", "without a path", false, 0},
		{"http://a:1?x=1", "without a path", false, 0},
		{"http://u:p@a:1", "credentials", false, 0},
		{"http://a:99999", "port", false, 0},
	} {
		u, err := ParseUpstream(tc.in)
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseUpstream(%q) error %q, want it to say %q", tc.in, err, tc.want)
			}
		case u.String() != tc.want || u.DNS != tc.dns || u.Weight != tc.weight:
			t.Errorf("ParseUpstream(%q) = %s (dns %v, weight %d), want %s (dns %v, weight %d)", tc.in, u, u.DNS, u.Weight, tc.want, tc.dns, tc.weight)
		}
	}
}

func TestParseUpstreams(t *testing.T) {
	ups, err := ParseUpstreams([]string{"http://a:1,http://b:2;w=2", "dns://c:3"})
	if err != nil || len(ups) != 3 || ups[1].Weight != 2 || !ups[2].DNS {
		t.Fatalf("ParseUpstreams = %v, %v; want a, b (weight 2), c (dns)", ups, err)
	}
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "no upstream"},
		{[]string{" , "}, "no upstream"},
		{[]string{"http://a:1", "http://a:1;w=2"}, "listed twice"},
		{[]string{"http://a:1,bad"}, "want a URL"},
	} {
		if _, err := ParseUpstreams(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseUpstreams(%q) error %v, want it to say %q", tc.in, err, tc.want)
		}
	}
}

func TestParsePolicyKeyAndWeights(t *testing.T) {
	for _, p := range Policies {
		if got, err := ParsePolicy(string(p)); got != p || err != nil {
			t.Errorf("ParsePolicy(%q) = %q, %v", p, got, err)
		}
	}
	if _, err := ParsePolicy("leastconn"); err == nil || !strings.Contains(err.Error(), "round-robin, random, least-request") {
		t.Errorf("ParsePolicy(leastconn) error %v, want the list of policies", err)
	}
	for _, tc := range []struct{ in, want string }{
		{"X-Routing-Key", "header:X-Routing-Key"},
		{"header:X-Tenant", "header:X-Tenant"},
		{"user", "user"},
		{"json:metadata.tenant", "json:metadata.tenant"},
		{"json:", "error"},
		{"json:a..b", "error"},
		{"header:", "error"},
		{"bad header", "error"},
	} {
		k, err := ParseKey(tc.in)
		got := k.String()
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("ParseKey(%q) = %s (%v), want %s", tc.in, got, err, tc.want)
		}
	}
	c, err := ParseWeights("queue=2, kv=0.5,prefix=0")
	if err != nil || c.Queue != 2 || c.KV != 0.5 || c.Prefix != 0 {
		t.Errorf("ParseWeights = %+v, %v", c, err)
	}
	for _, bad := range []string{"queue=-1", "lora=1", "queue", "queue=0,kv=0", "kv=101", "queue=NaN"} {
		if _, err := ParseWeights(bad); err == nil {
			t.Errorf("ParseWeights(%q) accepted", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	up, _ := ParseUpstream("http://a:1")
	ok := Config{Upstreams: []Upstream{up}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a zero config with an upstream: %v", err)
	}
	for _, tc := range []struct {
		mod  func(c *Config)
		want string
	}{
		{func(c *Config) { c.Upstreams = nil }, "no upstream"},
		{func(c *Config) { c.Policy = "fastest" }, "unknown policy"},
		{func(c *Config) { c.Balance = 0.5 }, "hash balance"},
		{func(c *Config) { c.Attempts = 9 }, "attempts"},
		{func(c *Config) { c.Prefix.Capacity = MaxIndexCapacity + 1 }, "capacity"},
		{func(c *Config) { c.Prefix.Threshold = 2 }, "threshold"},
		{func(c *Config) { c.Score.Interval = time.Millisecond }, "metrics interval"},
		{func(c *Config) { c.Health.Interval = time.Millisecond }, "interval"},
		{func(c *Config) { c.Health.Path = "readyz" }, "path"},
	} {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want it to say %q", err, tc.want)
		}
	}
}
