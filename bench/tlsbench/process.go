package tlsbench

// A server under test as a process: started in its own process group
// (killed with this process too, by its parent-death signal), its output
// in a log file, up once its port accepts, and its CPU time from /proc.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// upWait bounds the wait for a server to accept on its port.
const upWait = 30 * time.Second

// stopWait bounds the wait for a server to exit after SIGTERM before its
// process group is killed.
const stopWait = 5 * time.Second

// proc is a running server.
type proc struct {
	name string
	addr string // host:port it serves TLS on
	log  string // file with its stdout and stderr
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // its exit status, once done is closed
}

// startProc starts argv with env added to this process's environment,
// logging to logFile, and waits until addr accepts TCP connections. On
// error the process is stopped and the error quotes its log's tail.
func startProc(ctx context.Context, name string, argv, env []string, logFile, addr string) (*proc, error) {
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer lf.Close() // the child has its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("tlsbench: start %s: %w", name, err)
	}
	p := &proc{name: name, addr: addr, log: logFile, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	if err := p.waitUp(ctx); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitUp waits until p's address accepts a TCP connection, p exits, ctx
// ends or upWait passes.
func (p *proc) waitUp(ctx context.Context) error {
	deadline := time.Now().Add(upWait)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("tlsbench: %s exited before it listened (%v): %s", p.name, p.err, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tlsbench: %s did not listen on %s within %v: %s", p.name, p.addr, upWait, p.logTail())
		}
		select {
		case <-p.done:
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail is the last lines of p's log, for an error message.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	s := strings.Join(lines, " | ")
	if s == "" {
		return "(empty log " + p.log + ")"
	}
	return s
}

// cpu returns the CPU time p and its descendants have used so far.
func (p *proc) cpu() (time.Duration, error) {
	select {
	case <-p.done:
		return 0, fmt.Errorf("tlsbench: %s exited (%v): %s", p.name, p.err, p.logTail())
	default:
	}
	d, _, err := treeCPU("/proc", p.cmd.Process.Pid)
	return d, err
}

// pid is p's process id (nginx's master).
func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive returns an error if p has exited.
func (p *proc) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("tlsbench: %s exited (%v): %s", p.name, p.err, p.logTail())
	default:
		return nil
	}
}

// stop sends SIGTERM to p's process group, waits up to stopWait, then
// kills the group; it returns once p has exited. It may be called more
// than once.
func (p *proc) stop() {
	pg := -p.cmd.Process.Pid
	syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopWait):
		syscall.Kill(pg, syscall.SIGKILL)
		<-p.done
	}
	// A worker that outlived its master is in the same group.
	syscall.Kill(pg, syscall.SIGKILL)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// errNotFound says an outside program is not installed.
var errNotFound = errors.New("not installed")
