package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sync"
	"time"

	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ha"
)

// MaxResponse bounds a response line the client accepts.
const MaxResponse = 64 << 20

// DialError is the error of a client that cannot connect: nothing listens
// on the socket, or it is not there.
type DialError struct {
	Path string
	// Source, if set, says where Path came from ("--socket",
	// "$SLUICE_SOCKET", ...): the error names it after the path.
	Source string
	Err    error
}

func (e *DialError) Error() string {
	at := e.Path
	if e.Source != "" {
		at += " (" + e.Source + ")"
	}
	if errors.Is(e.Err, fs.ErrPermission) {
		return fmt.Sprintf("cannot reach sluice at %s: %v: the control socket is only for root and the user sluice runs as", at, e.Err)
	}
	return fmt.Sprintf("cannot reach sluice at %s: is `sluice run` running? (%v)", at, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// RemoteError is an error the server answered with. Its text is the
// server's, unchanged: a configuration error keeps its file:line:col.
type RemoteError struct {
	Op  string
	Msg string
}

func (e *RemoteError) Error() string { return e.Msg }

// Client is a connection to a control socket. Its methods may be called
// from several goroutines; calls are served one at a time, in order.
type Client struct {
	path string
	mu   sync.Mutex // one request in flight on conn; guards broken
	conn net.Conn
	sc   *bufio.Scanner
	// broken is the I/O error that left the connection out of step with
	// the server (a cancelled call, a lost connection): later calls fail.
	broken error
}

// Dial connects to the control socket at path.
//
// Before it returns, Dial checks that what listens there may be trusted
// with requests (and their keys): the socket's directory is writable by
// its owner alone, the directories above it are root's or this user's,
// and the socket file and the process listening (SO_PEERCRED) are root's,
// this user's or the directory owner's (trust.go). Otherwise the error is
// an *UntrustedError and nothing was sent.
func Dial(ctx context.Context, path string) (*Client, error) {
	o, err := checkSocketFile(path)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			err = oe.Err
		}
		return nil, &DialError{Path: path, Err: err}
	}
	if err := checkServer(path, c.(*net.UnixConn), o); err != nil {
		c.Close()
		return nil, err
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 64<<10), MaxResponse)
	return &Client{path: path, conn: c, sc: sc}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Call sends op with args (nil for none) and decodes the result into
// result (nil to ignore it). An error the server answered with is a
// *RemoteError. Cancelling ctx aborts the call; after that, or after any
// I/O error, the connection is out of step and every later call fails.
func (c *Client) Call(ctx context.Context, op string, args, result any) error {
	req := Request{Op: op}
	if args != nil {
		data, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("control: %s: %w", op, err)
		}
		req.Args = data
	}
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("control: %s: %w", op, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.broken != nil {
		return fmt.Errorf("control: %s: connection unusable after an earlier error: %w", op, c.broken)
	}
	// The context's end, by deadline or cancel, interrupts the I/O; the
	// context's error is set by then, so fail reports it.
	c.conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		} else {
			err = fmt.Errorf("control: %s: %s: %w", op, c.path, err)
		}
		c.broken = err
		return err
	}
	_, werr := c.conn.Write(append(line, '\n'))
	// After a failed write, a line the server sent before it hung up (too
	// many clients) says more than the write's error.
	if !c.sc.Scan() {
		if werr != nil {
			return fail(werr)
		}
		err := c.sc.Err()
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		return fail(err)
	}
	var resp Response
	if err := json.Unmarshal(c.sc.Bytes(), &resp); err != nil {
		return fail(fmt.Errorf("bad response: %w", err))
	}
	if !resp.OK {
		return &RemoteError{Op: op, Msg: resp.Error}
	}
	if result != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return fail(fmt.Errorf("bad result: %w", err))
		}
	}
	return nil
}

// SAs lists the SAs.
func (c *Client) SAs(ctx context.Context) ([]gateway.SAInfo, error) {
	var r []gateway.SAInfo
	return r, c.Call(ctx, OpSAList, nil, &r)
}

// Tunnels lists the tunnels.
func (c *Client) Tunnels(ctx context.Context) ([]gateway.TunnelInfo, error) {
	var r []gateway.TunnelInfo
	return r, c.Call(ctx, OpTunnelList, nil, &r)
}

// Policies lists the policies.
func (c *Client) Policies(ctx context.Context) ([]gateway.PolicyInfo, error) {
	var r []gateway.PolicyInfo
	return r, c.Call(ctx, OpPolicyList, nil, &r)
}

// Stats reads the counters.
func (c *Client) Stats(ctx context.Context) (gateway.Stats, error) {
	var r gateway.Stats
	return r, c.Call(ctx, OpStats, nil, &r)
}

// AddSA installs the SA that saTOML (one [[sa]] table) describes on tunnel,
// in direction dir ("in" or "out").
func (c *Client) AddSA(ctx context.Context, tunnel, dir, saTOML string) (SAAddResult, error) {
	var r SAAddResult
	return r, c.Call(ctx, OpSAAdd, SAAddArgs{Tunnel: tunnel, Dir: dir, SA: saTOML}, &r)
}

// IKE is ike.list: the IKE connections and counters.
func (c *Client) IKE(ctx context.Context) (gateway.IKEInfo, error) {
	var r gateway.IKEInfo
	err := c.Call(ctx, OpIKEList, nil, &r)
	return r, err
}

// InitiateIKE is ike.initiate.
func (c *Client) InitiateIKE(ctx context.Context, name string) error {
	return c.Call(ctx, OpIKEInit, IKEArgs{Name: name}, nil)
}

// TerminateIKE is ike.terminate.
func (c *Client) TerminateIKE(ctx context.Context, name string) error {
	return c.Call(ctx, OpIKETerm, IKEArgs{Name: name}, nil)
}

// HAStatus is ha.status: the hot-standby pair's status.
func (c *Client) HAStatus(ctx context.Context) (ha.Status, error) {
	var r ha.Status
	return r, c.Call(ctx, OpHAStatus, nil, &r)
}

// HAHandover is ha.handover: group ("" for all) goes to the standby; it
// returns the status after.
func (c *Client) HAHandover(ctx context.Context, group string) (ha.Status, error) {
	var r ha.Status
	return r, c.Call(ctx, OpHAHandover, HAArgs{Group: group}, &r)
}

// DelSA removes the inbound SA with the given SPI.
func (c *Client) DelSA(ctx context.Context, spi uint32) error {
	return c.Call(ctx, OpSADel, SADelArgs{SPI: spi}, nil)
}

// Reload makes the gateway re-read its configuration file and returns what
// it changed.
func (c *Client) Reload(ctx context.Context) (ReloadResult, error) {
	var r ReloadResult
	return r, c.Call(ctx, OpReload, nil, &r)
}

// Apply is config.apply: the gateway parses a.Config as the configuration
// file a.Name and applies it as Reload does, with a.TicketKeys, if any, as
// the TLS session ticket key ring. It returns what it changed.
func (c *Client) Apply(ctx context.Context, a ApplyArgs) (ReloadResult, error) {
	var r ReloadResult
	return r, c.Call(ctx, OpApply, a, &r)
}
