package target

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrAdminAPI marks a target whose batching settings the sweep must set
// but whose admin API is absent or refuses the token.
var ErrAdminAPI = errors.New("admin API unavailable")

// adminTimeout bounds one admin call: adding workers loads and warms model
// instances before the answer.
const adminTimeout = 2 * time.Minute

// batching is what GET and PATCH /admin/batching say and take: an encoder
// server's batch and workers, or a generation server's max_seqs and
// max_batched_tokens (its /v1 engine's), with max_latency and policy.
// What a server does not have is left out, so that putting its settings
// back sends only its own fields.
type batching struct {
	Batch            int    `json:"batch,omitempty"`
	MaxLatency       string `json:"max_latency,omitempty"`
	Policy           string `json:"policy,omitempty"`
	Workers          int    `json:"workers,omitempty"`
	MaxSeqs          int    `json:"max_seqs,omitempty"`
	MaxBatchedTokens int    `json:"max_batched_tokens,omitempty"`
	PrefixCache      *bool  `json:"prefix_cache,omitempty"`
}

// admin changes the batching settings of existing targets through
// /admin/batching, with the bearer token.
type admin struct {
	client *http.Client
	token  string
	keys   []string // the sweep keys it applies, for messages
}

// call sends one request to base's /admin/batching and decodes the answer
// into out.
func (a *admin) call(ctx context.Context, method, base string, body any, out *batching) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+"/admin/batching", rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s/admin/batching: %w", method, base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s/admin/batching: %w", method, base, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(raw))
		if c := ErrorCode(raw); c != "" {
			msg = c
		}
		return resp.StatusCode, fmt.Errorf("%s %s/admin/batching: %s: %s", method, base, resp.Status, msg)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s/admin/batching: answer is not the settings: %w", method, base, err)
	}
	return resp.StatusCode, nil
}

// check reads a target's settings, turning an absent admin API or a
// refused token into an error that names the fix.
func (a *admin) check(ctx context.Context, base string) (batching, error) {
	var b batching
	code, err := a.call(ctx, http.MethodGet, base, nil, &b)
	sweeps := "sweep." + strings.Join(a.keys, ", sweep.")
	switch {
	case code == http.StatusNotFound:
		return b, fmt.Errorf("target %s: %w: it has no admin API (GET /admin/batching: 404), so infer bench cannot apply %s between points; start it with infer serve --admin-token TOKEN (or INFER_ADMIN_TOKEN set), or drop %s from the scenario", base, ErrAdminAPI, sweeps, sweeps)
	case code == http.StatusUnauthorized && a.token == "":
		return b, fmt.Errorf("target %s: %w: it needs the admin token to apply %s; give it with infer bench --admin-token, the variable named by target.admin_token_env, or INFER_ADMIN_TOKEN", base, ErrAdminAPI, sweeps)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return b, fmt.Errorf("target %s: %w: it refused the admin token (%d); give infer bench the token the target was started with (--admin-token, the variable named by target.admin_token_env, or INFER_ADMIN_TOKEN)", base, ErrAdminAPI, code)
	case err != nil:
		return b, fmt.Errorf("target %s: %w: %v", base, ErrAdminAPI, err)
	}
	return b, nil
}

// patchOf is the PATCH body that applies c: only the settings it sets.
func patchOf(c Settings) map[string]any {
	p := map[string]any{}
	if c.Batch > 0 {
		p["batch"] = c.Batch
	}
	if c.Workers > 0 {
		p["workers"] = c.Workers
	}
	if c.MaxLatencySet {
		p["max_latency"] = c.MaxLatency.String()
	}
	if c.Policy != "" {
		p["policy"] = c.Policy
	}
	if c.MaxSeqs > 0 {
		p["max_seqs"] = c.MaxSeqs
	}
	if c.MaxBatchedTokens > 0 {
		p["max_batched_tokens"] = c.MaxBatchedTokens
	}
	if c.PrefixCache != nil {
		p["prefix_cache"] = *c.PrefixCache
	}
	return p
}

// took reports how got differs from what c asked for; "" when it took.
func took(c Settings, got batching) string {
	var diffs []string
	if c.Batch > 0 && got.Batch != c.Batch {
		diffs = append(diffs, fmt.Sprintf("batch %d, asked %d", got.Batch, c.Batch))
	}
	if c.Workers > 0 && got.Workers != c.Workers {
		diffs = append(diffs, fmt.Sprintf("workers %d, asked %d", got.Workers, c.Workers))
	}
	if c.MaxLatencySet {
		if d, err := time.ParseDuration(got.MaxLatency); err != nil || d != c.MaxLatency {
			diffs = append(diffs, fmt.Sprintf("max_latency %s, asked %v", got.MaxLatency, c.MaxLatency))
		}
	}
	if c.Policy != "" && got.Policy != c.Policy {
		diffs = append(diffs, fmt.Sprintf("policy %s, asked %s", got.Policy, c.Policy))
	}
	if c.MaxSeqs > 0 && got.MaxSeqs != c.MaxSeqs {
		diffs = append(diffs, fmt.Sprintf("max_seqs %d, asked %d", got.MaxSeqs, c.MaxSeqs))
	}
	if c.MaxBatchedTokens > 0 && got.MaxBatchedTokens != c.MaxBatchedTokens {
		diffs = append(diffs, fmt.Sprintf("max_batched_tokens %d, asked %d", got.MaxBatchedTokens, c.MaxBatchedTokens))
	}
	if c.PrefixCache != nil && (got.PrefixCache == nil || *got.PrefixCache != *c.PrefixCache) {
		diffs = append(diffs, fmt.Sprintf("prefix_cache %s, asked %t", boolText(got.PrefixCache), *c.PrefixCache))
	}
	return strings.Join(diffs, ", ")
}

func boolText(b *bool) string {
	if b == nil {
		return "absent"
	}
	return fmt.Sprint(*b)
}

// apply sets c on every target, then reads each back to check that it
// took.
func (a *admin) apply(ctx context.Context, bases []string, c Settings) error {
	body := patchOf(c)
	for _, base := range bases {
		var b batching
		if _, err := a.call(ctx, http.MethodPatch, base, body, &b); err != nil {
			return fmt.Errorf("configure target: %w", err)
		}
	}
	for _, base := range bases {
		var b batching
		if _, err := a.call(ctx, http.MethodGet, base, nil, &b); err != nil {
			return fmt.Errorf("configure target: %w", err)
		}
		if d := took(c, b); d != "" {
			return fmt.Errorf("configure target %s: the settings did not take: %s", base, d)
		}
	}
	return nil
}

// restore puts back each target's settings as they were before the run.
func (a *admin) restore(ctx context.Context, bases []string, orig []batching) error {
	var errs []error
	for i, base := range bases {
		var b batching
		if _, err := a.call(ctx, http.MethodPatch, base, orig[i], &b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
