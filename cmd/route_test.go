package cmd

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/route"
	"github.com/inferhq/infer/server"
)

func TestRouteFlags(t *testing.T) {
	parse := func(t *testing.T, args ...string) (routeConfig, error) {
		t.Helper()
		var got *routeOptions
		cmd := newCmdRoute(func(_ context.Context, o *routeOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		if err := cmd.Execute(); err != nil {
			return routeConfig{}, err
		}
		return got.config()
	}
	rc, err := parse(t, "--upstream", "http://127.0.0.1:8081")
	if err != nil {
		t.Fatal(err)
	}
	d := route.DefaultConfig()
	if h := rc.Host; h.Addr != server.DefaultAddr || h.Timeout != server.DefaultTimeout || h.MaxBody != server.DefaultMaxBody ||
		h.DrainTimeout != server.DefaultDrainTimeout || h.IdleTimeout != server.DefaultIdleTimeout || h.MaxConns != 0 {
		t.Errorf("host defaults = %+v", h)
	}
	cfg := rc.Router
	if cfg.Policy != route.RoundRobin || cfg.Key.Header != route.DefaultKeyHeader || cfg.Balance != route.DefaultBalance || cfg.Attempts != d.Attempts ||
		cfg.Score.Prefix != d.Score.Prefix || cfg.Score.Interval != d.Score.Interval || cfg.Prefix.Threshold != d.Prefix.Threshold || cfg.Health.Interval != d.Health.Interval {
		t.Errorf("defaults = %+v", cfg)
	}
	rc, err = parse(t, "--upstream", "http://a:1;w=2,http://b:2", "--upstream", "dns://c.svc:3", "--policy", "scored",
		"--hash-key", "user", "--score-weights", "queue=2,kv=0,prefix=1", "--metrics-interval", "50ms", "--attempts", "1",
		"--max-body", "64KiB", "--health-path", "/health", "--prefix-block", "32", "--timeout", "5m", "--max-conns", "100",
		"--admin-token", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if h := rc.Host; h.MaxBody != 64<<10 || h.Timeout != 5*time.Minute || h.MaxConns != 100 || h.AdminToken != "s3cret" {
		t.Errorf("host = %+v", h)
	}
	cfg = rc.Router
	if len(cfg.Upstreams) != 3 || cfg.Upstreams[0].Weight != 2 || !cfg.Upstreams[2].DNS || cfg.Policy != route.Scored ||
		cfg.Key.String() != "user" || cfg.Score.Queue != 2 || cfg.Score.KV != 0 || cfg.Score.Interval != 50*time.Millisecond ||
		cfg.Attempts != 1 || cfg.Health.Path != "/health" || cfg.Prefix.BlockBytes != 32 {
		t.Errorf("config = %+v", cfg)
	}
}

// Bad input: exit 2, and the message names the flag.
func TestRouteUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"route"}, "--upstream no upstream"},
		{[]string{"route", "--upstream", "http://a:1", "--policy", "fastest"}, `--policy: unknown policy "fastest": want round-robin, random, least-request, power-of-two, hash, prefix, scored`},
		{[]string{"route", "--upstream", "http://a:1;w=0"}, `--upstream "http://a:1;w=0": weight "0": want a whole number 1 to 100`},
		{[]string{"route", "--upstream", "http://a:1;w=two"}, `--upstream "http://a:1;w=two": weight "two"`},
		{[]string{"route", "--upstream", "localhost:8081"}, `--upstream "localhost:8081": want a URL`},
		{[]string{"route", "--upstream", "ftp://a:1"}, `--upstream "ftp://a:1": scheme "ftp"`},
		{[]string{"route", "--upstream", "http://a:1,http://a:1"}, "--upstream \"http://a:1\": listed twice"},
		{[]string{"route", "--upstream", "http://a:1", "--hash-key", "json:"}, "--hash-key"},
		{[]string{"route", "--upstream", "http://a:1", "--hash-balance", "0.5"}, "--hash-balance 0.5"},
		{[]string{"route", "--upstream", "http://a:1", "--score-weights", "queue=x"}, "--score-weights"},
		{[]string{"route", "--upstream", "http://a:1", "--metrics-interval", "1ms"}, "--metrics-interval 1ms"},
		{[]string{"route", "--upstream", "http://a:1", "--attempts", "0"}, "--attempts 0"},
		{[]string{"route", "--upstream", "http://a:1", "--max-body", "1GiB"}, "--max-body 1073741824: want 1 to 67108864 bytes (64 MiB)"},
		{[]string{"route", "--upstream", "http://a:1", "--eject-failures", "101"}, "--eject-failures 101: want 1 to 100"},
		{[]string{"route", "--upstream", "http://a:1", "--balance-rel", "0.5"}, "--balance-rel 0.5: want at least 1"},
		{[]string{"route", "--upstream", "http://a:1", "--health-timeout", "-1s"}, "--health-timeout -1s: must not be negative"},
		{[]string{"route", "--upstream", "http://a:1", "--resolve-interval", "0s"}, "--resolve-interval 0s: must not be 0"},
		{[]string{"route", "--upstream", "http://a:1", "--prefix-threshold", "2"}, "--prefix-threshold 2"},
		{[]string{"route", "--upstream", "http://a:1", "--health-path", "readyz"}, "--health-path"},
		{[]string{"route", "--upstream", "http://a:1", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"route", "--upstream", "http://a:1", "--max-conns", "-1"}, "--max-conns -1"},
		{[]string{"route", "--upstream", "http://a:1", "--log-level", "loud"}, "--log-level"},
	} {
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs(append(tc.args, "--addr", "127.0.0.1:0"))
		if code := exitCode(execute(context.Background(), root), &out); code != exitUsage {
			t.Errorf("infer %v: exit %d, want %d\n%s", tc.args, code, exitUsage, out.String())
		}
		if got := out.String(); !strings.Contains(got, tc.msg) || !strings.Contains(got, "Run 'infer route --help' for usage.") {
			t.Errorf("infer %v:\n%s\nwant %q", tc.args, got, tc.msg)
		}
	}
}
