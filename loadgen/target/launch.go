package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Launcher starts the server under test for a sweep point. infer bench
// injects one that runs `infer serve` (or `infer route`) as a child
// process; tests may start servers another way.
type Launcher interface {
	// Launch starts a server, `infer command` (CommandServe or
	// CommandRoute) with the given flags (the caller adds no --addr: the
	// launcher picks a free local one), and returns as soon as it is
	// started; the caller waits for /readyz. The server's output goes to
	// log (nil: kept only for LogTail).
	Launch(ctx context.Context, command string, flags []string, log io.Writer) (Server, error)
}

// The commands a Launcher starts.
const (
	CommandServe = "serve"
	CommandRoute = "route"
)

// Server is a started server.
type Server interface {
	// URL is the server's base URL, like http://127.0.0.1:41234.
	URL() string
	// PID is the server's process id, or 0 when it runs inside this
	// process (its CPU cannot then be told apart from the generator's).
	PID() int
	// Exited is closed when the server has exited.
	Exited() <-chan struct{}
	// LogTail returns the last lines of the server's output.
	LogTail() string
	// Stop asks the server to drain and exit, and waits for it until ctx
	// is done, then kills it.
	Stop(ctx context.Context) error
}

// ExecLauncher starts `Path Args... command --addr 127.0.0.1:PORT flags...`
// as a child process in a process group of its own (on Linux, killed if
// infer bench dies).
type ExecLauncher struct {
	Path string   // the infer binary
	Args []string // arguments before "serve"
	Env  []string // added to this process's environment
}

// Launch implements Launcher. A port taken between choosing it and the
// server binding it is retried with another.
func (l ExecLauncher) Launch(ctx context.Context, command string, flags []string, log io.Writer) (Server, error) {
	var err error
	for range 3 {
		var s *process
		s, err = l.start(command, flags, log)
		if err != nil {
			return nil, err
		}
		// A lost race for the port shows at once; anything else is for
		// the readiness wait to report.
		select {
		case <-s.Exited():
			if strings.Contains(s.LogTail(), "address already in use") {
				err = fmt.Errorf("server exited: %s", s.LogTail())
				continue
			}
			return s, nil
		case <-time.After(100 * time.Millisecond):
			return s, nil
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.Stop(sctx)
			cancel()
			return nil, ctx.Err()
		}
	}
	return nil, err
}

func (l ExecLauncher) start(command string, flags []string, log io.Writer) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append(append(append([]string(nil), l.Args...), command, flagAddr, addr), flags...)
	cmd := exec.Command(l.Path, args...)
	cmd.Env = append(os.Environ(), l.Env...)
	detach(cmd)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &process{cmd: cmd, url: "http://" + addr, exited: make(chan struct{}), tail: &tailBuffer{max: 40}}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", l.Path, err)
	}
	out := io.Writer(p.tail)
	if log != nil {
		out = io.MultiWriter(p.tail, log)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(out, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		<-copied
		close(p.exited)
	}()
	return p, nil
}

// freePort returns a TCP port free on 127.0.0.1 at the moment of asking.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// process is a server started by ExecLauncher.
type process struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	err    error // set before exited is closed
	tail   *tailBuffer
}

func (p *process) URL() string             { return p.url }
func (p *process) PID() int                { return p.cmd.Process.Pid }
func (p *process) Exited() <-chan struct{} { return p.exited }
func (p *process) LogTail() string         { return p.tail.String() }

func (p *process) Stop(ctx context.Context) error {
	select {
	case <-p.exited:
		return p.exitErr()
	default:
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		p.cmd.Process.Kill()
	}
	select {
	case <-p.exited:
		return p.exitErr()
	case <-ctx.Done():
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("server did not drain in time; killed: %w", ctx.Err())
	}
}

// exitErr reports an exit other than the clean one after SIGINT.
func (p *process) exitErr() error {
	var ee *exec.ExitError
	if p.err == nil || (errors.As(p.err, &ee) && !ee.Exited()) {
		return nil
	}
	return fmt.Errorf("server exited: %w", p.err)
}

// tailBuffer keeps the last max lines written to it.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, b...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		t.lines = append(t.lines, string(t.partial[:i]))
		t.partial = t.partial[i+1:]
		if len(t.lines) > t.max {
			t.lines = t.lines[len(t.lines)-t.max:]
		}
	}
	if len(t.partial) > 4096 {
		t.partial = t.partial[:0]
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if len(t.partial) > 0 {
		if len(lines) == t.max {
			lines = lines[1:]
		}
		lines = append(lines[:len(lines):len(lines)], string(t.partial))
	}
	return strings.Join(lines, "\n")
}
