package route

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Upstream is one --upstream entry: a replica's base URL, or a DNS name
// whose addresses are the replicas, with a weight.
type Upstream struct {
	// URL is the replica's base URL (http or https, no path), or for a
	// DNS upstream http://name:port, resolved into one replica per address.
	URL *url.URL
	// DNS is set for dns://name:port: the name is re-resolved every
	// Config.ResolveInterval, and each address is a replica.
	DNS bool
	// Weight is the replica's share against the others (round-robin,
	// random, hash's ring and bound), 1 to MaxWeight. Default 1.
	Weight int
}

// Bounds of the upstream list.
const (
	// MaxWeight bounds an upstream's weight.
	MaxWeight = 100
	// MaxReplicas bounds the replicas of a router, listed or resolved: a
	// DNS answer beyond it is cut (and logged).
	MaxReplicas = 256
)

// String is the upstream as written: URL[;w=N].
func (u Upstream) String() string {
	s := u.URL.String()
	if u.DNS {
		s = "dns://" + u.URL.Host
	}
	if u.Weight > 1 {
		s += ";w=" + strconv.Itoa(u.Weight)
	}
	return s
}

// ParseUpstream reads one upstream: http://host:port, https://host:port or
// dns://name:port, optionally followed by ;w=N (a weight, 1 to MaxWeight).
func ParseUpstream(s string) (Upstream, error) {
	raw, params, _ := strings.Cut(strings.TrimSpace(s), ";")
	u := Upstream{Weight: 1}
	if params != "" {
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok || k != "w" {
				return Upstream{}, fmt.Errorf("%q: unknown parameter %q: want ;w=N (a weight)", s, p)
			}
			w, err := strconv.Atoi(v)
			if err != nil || w < 1 || w > MaxWeight {
				return Upstream{}, fmt.Errorf("%q: weight %q: want a whole number 1 to %d", s, v, MaxWeight)
			}
			u.Weight = w
		}
	}
	pu, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || pu.Host == "" || pu.Opaque != "" {
		return Upstream{}, fmt.Errorf("%q: want a URL like http://127.0.0.1:8081 or dns://name:port", s)
	}
	switch pu.Scheme {
	case "http", "https":
	case "dns":
		u.DNS = true
		if pu.Port() == "" {
			return Upstream{}, fmt.Errorf("%q: a DNS upstream needs a port: dns://name:port", s)
		}
		pu.Scheme = "http"
	default:
		return Upstream{}, fmt.Errorf("%q: scheme %q: want http://, https:// or dns://", s, pu.Scheme)
	}
	switch {
	case pu.User != nil:
		return Upstream{}, fmt.Errorf("%q: credentials in the URL are not supported", s)
	case pu.Path != "" && pu.Path != "/", pu.RawQuery != "", pu.Fragment != "":
		return Upstream{}, fmt.Errorf("%q: want a base URL without a path, query or fragment (the router keeps the request's path)", s)
	}
	if p := pu.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return Upstream{}, fmt.Errorf("%q: port %q: want 1 to 65535", s, p)
		}
	}
	if h := pu.Hostname(); h == "" || strings.ContainsAny(h, " %") {
		return Upstream{}, fmt.Errorf("%q: want a host name or address", s)
	}
	pu.Path = ""
	u.URL = pu
	return u, nil
}

// ParseUpstreams reads a list of upstreams, each entry holding one or more
// separated by commas; a replica listed twice is an error.
func ParseUpstreams(entries []string) ([]Upstream, error) {
	var ups []Upstream
	seen := map[string]bool{}
	for _, e := range entries {
		for s := range strings.SplitSeq(e, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			u, err := ParseUpstream(s)
			if err != nil {
				return nil, err
			}
			key := u.String()
			if i := strings.IndexByte(key, ';'); i >= 0 {
				key = key[:i]
			}
			if seen[key] {
				return nil, fmt.Errorf("%q: listed twice", s)
			}
			seen[key] = true
			ups = append(ups, u)
		}
	}
	if len(ups) == 0 {
		return nil, errors.New("no upstream: list at least one replica (http://host:port or dns://name:port)")
	}
	if len(ups) > MaxReplicas {
		return nil, fmt.Errorf("%d upstreams: at most %d", len(ups), MaxReplicas)
	}
	return ups, nil
}

// hostPort returns host:port of u, with the scheme's default port.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
