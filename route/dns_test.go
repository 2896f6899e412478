package route

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a DNS server on 127.0.0.1 (UDP) that answers A queries for
// one name with the addresses set, as a Kubernetes headless Service's
// name does with its ready pods.
type dnsServer struct {
	conn  net.PacketConn
	name  dnsmessage.Name
	mu    sync.Mutex
	addrs []string
}

func startDNS(t *testing.T, name string) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("cannot listen on UDP: %v", err)
	}
	s := &dnsServer{conn: conn, name: dnsmessage.MustNewName(name + ".")}
	done := make(chan struct{})
	go func() { defer close(done); s.serve() }()
	t.Cleanup(func() { conn.Close(); <-done })
	return s
}

func (s *dnsServer) set(addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs = addrs
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var q dnsmessage.Message
		if q.Unpack(buf[:n]) != nil || len(q.Questions) != 1 {
			continue
		}
		ans := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true}, Questions: q.Questions}
		qq := q.Questions[0]
		switch {
		case !strings.EqualFold(qq.Name.String(), s.name.String()):
			ans.RCode = dnsmessage.RCodeNameError
		case qq.Type == dnsmessage.TypeA:
			s.mu.Lock()
			for _, a := range s.addrs {
				ip := net.ParseIP(a).To4()
				ans.Answers = append(ans.Answers, dnsmessage.Resource{
					Header: dnsmessage.ResourceHeader{Name: qq.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 0},
					Body:   &dnsmessage.AResource{A: [4]byte(ip)},
				})
			}
			s.mu.Unlock()
		}
		if b, err := ans.Pack(); err == nil {
			s.conn.WriteTo(b, from)
		}
	}
}

// resolver is Go's own DNS client, asking s whatever the system's
// resolv.conf names.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

// A dns:// upstream asked of a real DNS server, through Go's DNS client:
// a changed answer is picked up at the next resolve.
func TestDNSChangedAnswerIsPickedUp(t *testing.T) {
	a := newFake(t)
	port := a.URL[strings.LastIndex(a.URL, ":")+1:]
	b := newFakeAt(t, "127.0.0.2:"+port)
	dns := startDNS(t, "replicas.infer-test.internal")
	dns.set("127.0.0.1")
	up, err := ParseUpstream("dns://replicas.infer-test.internal:" + port)
	if err != nil {
		t.Fatal(err)
	}
	tr := startRouter(t, Config{Upstreams: []Upstream{up}, Resolver: dns.resolver(), ResolveInterval: 100 * time.Millisecond})
	if got := names2(tr.Replicas()); got != "127.0.0.1:"+port {
		t.Fatalf("replicas %s, want 127.0.0.1:%s", got, port)
	}
	dns.set("127.0.0.2")
	eventually(t, "the new answer replaces the old", func() bool {
		rs := tr.Replicas()
		return names2(rs) == "127.0.0.2:"+port && rs[0].State() == StateReady
	})
	resp, _ := tr.post(t, "/batched", `{}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(ReplicaHeader) != "127.0.0.2:"+port || b.hits.Load() != 1 {
		t.Errorf("after the change: %d from %q (b hits %d), want 200 from 127.0.0.2:%s", resp.StatusCode, resp.Header.Get(ReplicaHeader), b.hits.Load(), port)
	}
}
