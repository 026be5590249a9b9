package lab

// Long-running processes inside a namespace (a gateway daemon, a peer):
// started with `ip netns exec`, which execs the program so that the process
// we hold is the program itself; in a process group of their own, so that a
// Ctrl-C at the terminal reaches only us and we stop them in order; and
// with SIGKILL as their parent-death signal, so that none outlives a killed
// test binary.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxOutput is how much of a process's output a Process keeps in memory
// (the end of it).
const maxOutput = 64 << 10

// ProcOptions configure Lab.Start. The zero value is usable.
type ProcOptions struct {
	// Env is added to this process's environment.
	Env []string
	// LogFile, if set, also receives the process's standard output and
	// standard error (created or truncated).
	LogFile string
	// StopTimeout is how long Stop and Close wait after SIGTERM before
	// SIGKILL; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
}

// Process is a process started by Lab.Start. Its methods are safe for
// concurrent use.
type Process struct {
	name    string
	cmd     *exec.Cmd
	out     tailBuffer
	logFile *os.File
	timeout time.Duration

	done    chan struct{} // closed when the process has been waited for
	waitErr error         // valid after done

	stopOnce sync.Once
	stopErr  error
}

// Start runs argv in the namespace ns (nil: this process's namespace) with
// its output captured, and registers Stop with the lab. name identifies the
// process in errors and logs. The process runs until it exits, Stop, or
// the lab's Close.
func (l *Lab) Start(ns *Netns, name string, argv []string, opt *ProcOptions) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("lab: Start needs a command")
	}
	var o ProcOptions
	if opt != nil {
		o = *opt
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	var cmd *exec.Cmd
	if ns != nil {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns.name}, argv...)...)
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{name: name, cmd: cmd, timeout: o.StopTimeout, done: make(chan struct{})}
	var w io.Writer = &p.out
	if o.LogFile != "" {
		f, err := os.Create(o.LogFile)
		if err != nil {
			return nil, fmt.Errorf("lab: %s: %w", name, err)
		}
		p.logFile = f
		w = io.MultiWriter(&p.out, f)
	}
	cmd.Stdout, cmd.Stderr = w, w
	// A child the process leaves behind may hold the output pipe open;
	// do not wait for it longer than this once the process has exited.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		if p.logFile != nil {
			p.logFile.Close()
		}
		return nil, fmt.Errorf("lab: start %s: %w", name, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		if p.logFile != nil {
			p.logFile.Close()
		}
		close(p.done)
	}()
	if err := l.register("stop "+name, p.Stop); err != nil {
		return nil, err
	}
	l.log.Debug("process started", "name", name, "pid", cmd.Process.Pid, "argv", strings.Join(argv, " "))
	return p, nil
}

// Name is the name given to Start.
func (p *Process) Name() string { return p.name }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and if so how: nil for
// status 0, an *exec.ExitError otherwise.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Output returns what the process wrote to standard output and standard
// error so far (the last 64 KiB).
func (p *Process) Output() string { return p.out.String() }

// Stop ends the process: SIGTERM to its process group, then SIGKILL if it
// has not exited within its stop timeout. It returns nil if the process
// exited on SIGTERM (or had exited with status 0 before), and otherwise an
// error that carries the end of its output. It is idempotent.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

// Kill ends the process (its whole process group) with SIGKILL at once,
// as a crash would, and waits until it has exited. An end by Kill is not
// an error: Stop returns nil after it.
func (p *Process) Kill() {
	p.stopOnce.Do(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

func (p *Process) stop() error {
	pgid := -p.cmd.Process.Pid
	select {
	case <-p.done:
		return p.exitError(p.waitErr, false)
	default:
	}
	syscall.Kill(pgid, syscall.SIGTERM)
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.exitError(p.waitErr, true)
	case <-t.C:
	}
	syscall.Kill(pgid, syscall.SIGKILL)
	<-p.done // SIGKILL cannot be ignored
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %v and was killed%s", p.name, p.Pid(), p.timeout, p.tail())
}

// exitError describes how the process ended; an end by the SIGTERM we sent
// is not an error.
func (p *Process) exitError(err error, termSent bool) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if termSent && errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return fmt.Errorf("%s (pid %d): %w%s", p.name, p.Pid(), err, p.tail())
}

// tail is the last lines of output, for an error message.
func (p *Process) tail() string {
	s := strings.TrimSpace(p.Output())
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "; its output ends:\n\t" + strings.Join(lines, "\n\t")
}

// tailBuffer keeps the last maxOutput bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - maxOutput; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
