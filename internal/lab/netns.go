package lab

// Network namespaces, veth pairs, addresses and routes; commands and sockets
// inside a namespace.
//
// Namespaces are created with iproute2 (`ip netns add`), so they are the
// named namespaces every tool sees (`ip netns list`, `ip netns exec`, files
// under /run/netns). Links, addresses and routes go over netlink through a
// handle bound to the namespace, so they need no helper process and no
// thread switching. Sockets are opened from this process by a goroutine
// that locks its OS thread, enters the namespace (setns), creates the
// socket and goes back; a socket stays in the namespace it was created in
// whichever thread uses it later.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where iproute2 keeps named namespaces.
const NetnsDir = "/run/netns"

// cleanupTimeout bounds each command Close runs (ip netns del).
const cleanupTimeout = 10 * time.Second

// Netns is a network namespace created by a Lab. It is deleted by the
// lab's Close; its methods are safe for concurrent use until then.
type Netns struct {
	name string
	h    netns.NsHandle  // open while the lab is
	nl   *netlink.Handle // netlink sockets inside the namespace
}

// Name is the namespace's name, for `ip netns exec NAME`.
func (n *Netns) Name() string { return n.name }

// Path is the namespace's file, /run/netns/NAME.
func (n *Netns) Path() string { return filepath.Join(NetnsDir, n.name) }

// String is the name.
func (n *Netns) String() string { return n.name }

var suffixRE = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// NewNetns creates the namespace "ID-suffix" (see Lab.ID), with its
// loopback up, and registers its deletion. suffix is 1 to 8 lower-case
// letters or digits, unique in the lab.
func (l *Lab) NewNetns(ctx context.Context, suffix string) (*Netns, error) {
	if !suffixRE.MatchString(suffix) {
		return nil, fmt.Errorf("lab: namespace suffix %q: want 1 to 8 of a-z and 0-9", suffix)
	}
	name := l.id + "-" + suffix
	if err := l.reserve(name); err != nil {
		return nil, err
	}
	// Registered first: an ip killed by ctx may have created the
	// namespace before it died.
	n := &Netns{name: name, h: -1}
	if err := l.register("delete namespace "+name, n.delete); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, cmdError("ip netns add "+name, out, err)
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("lab: open namespace %s: %w", name, err)
	}
	n.h = h
	if n.nl, err = netlink.NewHandleAt(h); err != nil {
		return nil, fmt.Errorf("lab: netlink in %s: %w", name, err)
	}
	if err := n.LinkUp("lo"); err != nil {
		return nil, err
	}
	l.log.Debug("namespace created", "netns", name)
	return n, nil
}

// delete releases the handles and deletes the namespace. Its devices go
// with it once no process and no socket holds it any more.
func (n *Netns) delete() error {
	if n.nl != nil {
		n.nl.Close()
	}
	if n.h >= 0 {
		n.h.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "del", n.name).CombinedOutput()
	if err != nil {
		if _, serr := os.Stat(n.Path()); errors.Is(serr, os.ErrNotExist) {
			return nil // already gone
		}
		return cmdError("ip netns del "+n.name, out, err)
	}
	return nil
}

// Veth creates a veth pair, aName in a and bName in b, and brings both ends
// up. The pair disappears with either namespace. Interface names have at
// most 15 bytes.
func (l *Lab) Veth(a *Netns, aName string, b *Netns, bName string) error {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(int(b.h))}
	if err := a.nl.LinkAdd(v); err != nil {
		return fmt.Errorf("lab: veth %s (%s) - %s (%s): %w", aName, a, bName, b, err)
	}
	if err := a.LinkUp(aName); err != nil {
		return err
	}
	if err := b.LinkUp(bName); err != nil {
		return err
	}
	l.log.Debug("veth created", "a", a.name+"/"+aName, "b", b.name+"/"+bName)
	return nil
}

func (n *Netns) link(name string) (netlink.Link, error) {
	lk, err := n.nl.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("lab: %s in %s: %w", name, n.name, err)
	}
	return lk, nil
}

// LinkUp brings the interface up.
func (n *Netns) LinkUp(ifname string) error {
	lk, err := n.link(ifname)
	if err != nil {
		return err
	}
	if err := n.nl.LinkSetUp(lk); err != nil {
		return fmt.Errorf("lab: %s up in %s: %w", ifname, n.name, err)
	}
	return nil
}

// AddAddr adds an address with its prefix length (192.0.2.1/24) to the
// interface. IPv6 addresses skip duplicate address detection.
func (n *Netns) AddAddr(ifname string, p netip.Prefix) error {
	lk, err := n.link(ifname)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: ipNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := n.nl.AddrAdd(lk, a); err != nil {
		return fmt.Errorf("lab: add %s to %s in %s: %w", p, ifname, n.name, err)
	}
	return nil
}

// AddRoute routes dst out of the interface, through the gateway via if it
// is valid, directly (a device route) if not.
func (n *Netns) AddRoute(dst netip.Prefix, ifname string, via netip.Addr) error {
	lk, err := n.link(ifname)
	if err != nil {
		return err
	}
	r := &netlink.Route{LinkIndex: lk.Attrs().Index, Dst: ipNet(dst.Masked())}
	if via.IsValid() {
		r.Gw = via.AsSlice()
	} else {
		r.Scope = netlink.SCOPE_LINK
	}
	if err := n.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("lab: route %s dev %s in %s: %w", dst, ifname, n.name, err)
	}
	return nil
}

// HasLink reports whether the interface exists in the namespace.
func (n *Netns) HasLink(ifname string) (bool, error) {
	_, err := n.nl.LinkByName(ifname)
	var nf netlink.LinkNotFoundError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &nf):
		return false, nil
	}
	return false, fmt.Errorf("lab: %s in %s: %w", ifname, n.name, err)
}

// LinkMTU returns the interface's MTU.
func (n *Netns) LinkMTU(ifname string) (int, error) {
	lk, err := n.link(ifname)
	if err != nil {
		return 0, err
	}
	return lk.Attrs().MTU, nil
}

// Command returns `ip netns exec NAME name args...`, bound to ctx. The
// caller runs it.
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// Exec runs name with args in the namespace and returns its standard
// output. On failure the error holds the command, its status and the
// (trimmed) standard error.
func (n *Netns) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := n.Command(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, cmdError(fmt.Sprintf("%s: %s", n.name, strings.Join(append([]string{name}, args...), " ")), []byte(stderr.String()), err)
	}
	return out, nil
}

// Do runs fn on an OS thread that is inside the namespace, and waits for
// it. Sockets and devices fn creates belong to the namespace. Goroutines fn
// starts do not run inside it. Do calls fn on a goroutine of its own; if
// that thread cannot return to its namespace afterwards it is left locked,
// so that the runtime ends it instead of reusing it.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("lab: current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(n.h); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("lab: enter %s: %w", n.name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("lab: leave %s: %w", n.name, err))
			return // the thread stays locked and ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// ListenUDP opens a UDP socket in the namespace bound to addr (port 0 picks
// one).
func (n *Netns) ListenUDP(addr netip.AddrPort) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := n.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lab: %s: %w", n.name, err)
	}
	return c, nil
}

// Listen is net.Listen in the namespace.
func (n *Netns) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lab: %s: %w", n.name, err)
	}
	return ln, nil
}

// Dial is net.Dialer.DialContext in the namespace.
func (n *Netns) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lab: %s: %w", n.name, err)
	}
	return c, nil
}

// nameRE matches the namespaces labs create: "sl-PID-RAND-SUFFIX".
var nameRE = regexp.MustCompile(`^` + regexp.QuoteMeta(Prefix) + `([0-9]+)-[0-9a-f]+-[a-z0-9]+$`)

// Sweep deletes the namespaces that labs of dead processes left behind:
// names of the lab form whose PID is no running process. Namespaces of
// live processes (this one included) and every other namespace are left
// alone. It returns the names it deleted.
func Sweep(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	var deleted []string
	var errs []error
	for _, e := range ents {
		m := nameRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		if out, err := exec.CommandContext(ctx, "ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			errs = append(errs, cmdError("ip netns del "+e.Name(), out, err))
			continue
		}
		deleted = append(deleted, e.Name())
	}
	return deleted, errors.Join(errs...)
}

// alive reports whether a process with the pid exists. When in doubt it
// says yes.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return !errors.Is(err, syscall.ESRCH)
}

func cmdError(what string, out []byte, err error) error {
	msg := strings.TrimSpace(string(out))
	if msg == "" {
		return fmt.Errorf("lab: %s: %w", what, err)
	}
	return fmt.Errorf("lab: %s: %w: %s", what, err, msg)
}

func ipNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}
