package kit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one OS process the kit starts, kills and restarts.
type Proc struct {
	Name string
	Bin  string
	Args []string
	Env  []string // added to the kit's environment (or to BaseEnv)
	// BaseEnv, when not nil, replaces the kit's environment under Env
	// (a container's: only what its definition gives it).
	BaseEnv []string
	Dir     string // working directory and home of the log files
	// Ready is how Start knows the process serves: an http URL answering
	// 200 (e.g. .../healthz) or a host:port accepting TCP connections.
	Ready string
	// StartTimeout bounds Start; default 3 minutes.
	StartTimeout time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	logs   []string
	starts int
	kills  int

	startFailures []string
}

// StartFailures are the start-ups that exited before the process was ready
// (each is a finding: a process should not die while starting).
func (p *Proc) StartFailures() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.startFailures...)
}

// ErrExited is returned by Start when the process exits before it is ready.
var ErrExited = errors.New("process exited before it was ready")

// Start starts the process and waits until it is ready.
func (p *Proc) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.cmd != nil && !p.exitedLocked() {
		p.mu.Unlock()
		return fmt.Errorf("%s is already running", p.Name)
	}
	p.starts++
	logPath := filepath.Join(p.Dir, fmt.Sprintf("%s-%d.log", p.Name, p.starts))
	f, err := os.Create(logPath)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	p.logs = append(p.logs, logPath)
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Dir = p.Dir
	base := os.Environ()
	if p.BaseEnv != nil {
		base = p.BaseEnv
	}
	cmd.Env = append(append([]string(nil), base...), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		p.mu.Unlock()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()

	timeout := p.StartTimeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		select {
		case <-exited:
			return fmt.Errorf("%s: %w (%s); log:\n%s", p.Name, ErrExited, cmd.ProcessState, p.Tail(3000))
		default:
		}
		if p.ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never became ready at %s: %w; log:\n%s", p.Name, p.Ready, ctx.Err(), p.Tail(3000))
		case <-exited:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *Proc) ready() bool {
	if p.Ready == "" {
		return true
	}
	if strings.HasPrefix(p.Ready, "http") {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get(p.Ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	conn, err := net.DialTimeout("tcp", p.Ready, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func (p *Proc) exitedLocked() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exitedLocked()
}

// Kill sends SIGKILL to the process group and waits for the exit.
func (p *Proc) Kill() {
	p.signal(syscall.SIGKILL, time.Minute)
	p.mu.Lock()
	p.kills++
	p.mu.Unlock()
}

// Stop sends SIGTERM, waits up to timeout for a drained exit, then kills.
// It returns the exit error (nil for exit 0).
func (p *Proc) Stop(timeout time.Duration) error {
	if !p.signal(syscall.SIGTERM, timeout) {
		p.signal(syscall.SIGKILL, time.Minute)
		return fmt.Errorf("%s did not stop within %s of SIGTERM", p.Name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState == nil {
		return nil
	}
	if !p.cmd.ProcessState.Success() {
		return fmt.Errorf("%s exited with %s", p.Name, p.cmd.ProcessState)
	}
	return nil
}

// signal signals the group and reports whether the process exited within
// timeout.
func (p *Proc) signal(sig syscall.Signal, timeout time.Duration) bool {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Pid is the running process's id (0 when it is not running).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exitedLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the process group without waiting (SIGSTOP and
// SIGCONT stall and resume it: a network partition of the process).
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	running := cmd != nil && !p.exitedLocked()
	p.mu.Unlock()
	if !running {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// Kills counts SIGKILLs; Starts counts starts.
func (p *Proc) Kills() int  { p.mu.Lock(); defer p.mu.Unlock(); return p.kills }
func (p *Proc) Starts() int { p.mu.Lock(); defer p.mu.Unlock(); return p.starts }

// Tail is the last n bytes of the process's current log.
func (p *Proc) Tail(n int) string {
	p.mu.Lock()
	var path string
	if len(p.logs) > 0 {
		path = p.logs[len(p.logs)-1]
	}
	p.mu.Unlock()
	if path == "" {
		return ""
	}
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Logs lists every log file of the process, oldest first.
func (p *Proc) Logs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logs...)
}

// Grep returns the log lines of every start that contain s.
func (p *Proc) Grep(s string) []string {
	var out []string
	for _, path := range p.Logs() {
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, s) {
				out = append(out, l)
			}
		}
	}
	return out
}

// FreePort returns a free TCP port on 127.0.0.1, never one it returned
// before in this process.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port that was not handed out before")
}

// portsGiven are the ports FreePort returned: a port is free only until
// its process listens, and a test allocates all of a pipeline's ports
// before it starts any (the kernel handed one port to a NATS node and to
// a flusher in one cluster soak).
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)
