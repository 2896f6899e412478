package target

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrUnreachable marks a target that does not answer HTTP.
var ErrUnreachable = errors.New("unreachable")

// readiness is what one GET /readyz said.
type readiness struct {
	status int
	model  string
}

func getReady(ctx context.Context, client *http.Client, base string) (readiness, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return readiness{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return readiness{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Model string `json:"model"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	return readiness{status: resp.StatusCode, model: body.Model}, nil
}

// Probe checks that an existing server answers, fast: a refused or
// silent target is ErrUnreachable at once. A server that is not ready
// (/readyz answering 503, or any status but 2xx, 404 and 405: a 501 is
// no readiness either) is waited for until timeout. A server without
// /readyz (404 or 405) counts as ready; noReady then says so. It returns
// the model name /readyz gave, if any.
func Probe(ctx context.Context, client *http.Client, base string, timeout time.Duration) (model string, noReady int, err error) {
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := getReady(pctx, client, base)
		cancel()
		switch {
		case ctx.Err() != nil:
			return "", 0, ctx.Err()
		case err != nil:
			return "", 0, fmt.Errorf("target %s: %w: %v", base, ErrUnreachable, err)
		case r.status >= 200 && r.status < 300:
			return r.model, 0, nil
		case r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed:
			return "", r.status, nil
		case time.Now().Before(deadline):
			if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
				return "", 0, err
			}
		default:
			return "", 0, fmt.Errorf("target %s: not ready after %v (/readyz answers %d %s)", base, timeout, r.status, http.StatusText(r.status))
		}
	}
}

// WaitReady waits until a launched server answers /readyz with 200, and
// returns the model it names. It fails at once if the server exits, and
// after timeout; both errors carry the server's log tail.
func WaitReady(ctx context.Context, client *http.Client, s Server, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := 20 * time.Millisecond
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := getReady(pctx, client, s.URL())
		pcancel()
		if err == nil && r.status == http.StatusOK {
			return r.model, nil
		}
		select {
		case <-s.Exited():
			return "", fmt.Errorf("server exited before it was ready; its last output:\n%s", indent(s.LogTail()))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return "", fmt.Errorf("server at %s not ready after %v; its last output:\n%s", s.URL(), timeout, indent(s.LogTail()))
			}
			return "", ctx.Err()
		case <-time.After(wait):
			wait = min(2*wait, 500*time.Millisecond)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func indent(s string) string {
	if s == "" {
		return "  (no output)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// FirstModel returns the first model an OpenAI-compatible server lists at
// /v1/models; base is the server's root.
func FirstModel(ctx context.Context, client *http.Client, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", err
	}
	if len(list.Data) == 0 {
		return "", nil
	}
	return list.Data[0].ID, nil
}
