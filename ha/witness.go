package ha

import (
	"net"
	"time"
)

// witnessLoop probes the witness every Interval, for fencing.
func (m *Member) witnessLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if m.probeWitness() {
			m.witnessOK.Store(time.Now().UnixNano())
		}
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
	}
}

// witnessReachable probes the witness now; true without one.
func (m *Member) witnessReachable() bool {
	if m.cfg.Witness == "" {
		return true
	}
	if m.probeWitness() {
		m.witnessOK.Store(time.Now().UnixNano())
		return true
	}
	return false
}

// probeWitness reports whether a TCP connect to the witness completes
// within Interval: the witness itself answered the SYN (its SYN-ACK
// acknowledges this connect's sequence number). A refused connect is not
// an answer from the witness: a reset or an ICMP unreachable may come from
// anything on the path (a router that lost its route, a firewall that
// rejects, a host that took the witness's address), and counting it would
// keep an isolated owner from fencing. The witness's port is any service
// (Config.Witness), so nothing past the connect is asked of it.
func (m *Member) probeWitness() bool {
	d := net.Dialer{Timeout: m.cfg.Interval}
	c, err := d.DialContext(m.ctx, "tcp", m.cfg.Witness)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
