package target

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"
)

// Reachable checks that every base URL still accepts TCP connections: a
// server that went away (its process gone, its port closed) refuses them,
// while a busy one still accepts them. A refusal is retried twice, 250 ms
// apart, before it counts; the error wraps ErrUnreachable.
func Reachable(ctx context.Context, urls []string) error {
	for _, base := range urls {
		u, err := url.Parse(base)
		if err != nil {
			return fmt.Errorf("target %s: %w", base, err)
		}
		host := u.Host
		if u.Port() == "" {
			port := "80"
			if u.Scheme == "https" {
				port = "443"
			}
			host = net.JoinHostPort(u.Hostname(), port)
		}
		var d net.Dialer
		for try := 0; ; try++ {
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := d.DialContext(dctx, "tcp", host)
			cancel()
			if err == nil {
				c.Close()
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if try == 2 {
				return fmt.Errorf("target %s: %w: %v", base, ErrUnreachable, err)
			}
			if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}
