package lab

// A NAT in a namespace: nftables masquerades what the namespace forwards
// out of one interface, and its connection tracking table, read from
// /proc/net/nf_conntrack (per namespace), shows the mappings it holds, so
// that a test can see a mapping held, forgotten or replaced without the
// conntrack tool.

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Masquerade makes n a NAT router: it forwards, and what leaves through
// outIf takes that interface's address and, where the port is taken,
// another port (nftables masquerade). With udpTimeout > 0 a UDP mapping
// is forgotten after that many seconds without a packet, whether or not
// the flow saw answers (nf_conntrack_udp_timeout and
// nf_conntrack_udp_timeout_stream, both per namespace).
func (n *Netns) Masquerade(ctx context.Context, outIf string, udpTimeout int) error {
	script := fmt.Sprintf("table ip nat {\n  chain post {\n    type nat hook postrouting priority 100;\n    oifname %q masquerade\n  }\n}\n", outIf)
	cmd := n.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return cmdError(n.name+": nft -f", out, err)
	}
	sysctls := []string{"net.ipv4.ip_forward=1"}
	if udpTimeout > 0 {
		for _, k := range []string{"nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"} {
			sysctls = append(sysctls, fmt.Sprintf("net.netfilter.%s=%d", k, udpTimeout))
		}
	}
	for _, s := range sysctls {
		if _, err := n.Exec(ctx, "sysctl", "-qw", s); err != nil {
			return err
		}
	}
	return nil
}

// UDPFlow is one UDP entry of a namespace's connection tracking table:
// the flow as it arrived (Src to Dst) and the answer it expects (ReplySrc
// to ReplyDst). For a flow the namespace masquerades, ReplyDst is the
// mapping: the NAT's address and port the far side sends to.
type UDPFlow struct {
	Src, Dst           netip.AddrPort
	ReplySrc, ReplyDst netip.AddrPort
	Timeout            int  // seconds left
	Replied            bool // answers were seen (not [UNREPLIED])
}

// UDPFlows reads n's connection tracking table and returns its IPv4 UDP
// entries.
func (n *Netns) UDPFlows(ctx context.Context) ([]UDPFlow, error) {
	out, err := n.Exec(ctx, "cat", "/proc/net/nf_conntrack")
	if err != nil {
		return nil, err
	}
	return parseConntrack(string(out))
}

// parseConntrack reads the UDP lines of /proc/net/nf_conntrack:
//
//	ipv4 2 udp 17 27 src=A dst=B sport=P dport=Q [UNREPLIED] src=B dst=C sport=Q dport=R [ASSURED] mark=0 ...
func parseConntrack(text string) ([]UDPFlow, error) {
	var flows []UDPFlow
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "ipv4" || f[2] != "udp" {
			continue
		}
		var fl UDPFlow
		t, err := strconv.Atoi(f[4])
		if err != nil {
			return nil, fmt.Errorf("lab: conntrack line %q: timeout %q", line, f[4])
		}
		fl.Timeout, fl.Replied = t, true
		var addrs [2][2]netip.Addr // [direction][src, dst]
		var ports [2][2]uint16
		dir := -1
		for _, kv := range f[5:] {
			if kv == "[UNREPLIED]" {
				fl.Replied = false
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			switch k {
			case "src", "dst":
				if k == "src" {
					dir++
				}
				if dir < 0 || dir > 1 {
					return nil, fmt.Errorf("lab: conntrack line %q: more than two tuples", line)
				}
				a, err := netip.ParseAddr(v)
				if err != nil {
					return nil, fmt.Errorf("lab: conntrack line %q: %v", line, err)
				}
				addrs[dir][map[string]int{"src": 0, "dst": 1}[k]] = a
			case "sport", "dport":
				if dir < 0 || dir > 1 {
					return nil, fmt.Errorf("lab: conntrack line %q: port before address", line)
				}
				p, err := strconv.ParseUint(v, 10, 16)
				if err != nil {
					return nil, fmt.Errorf("lab: conntrack line %q: %v", line, err)
				}
				ports[dir][map[string]int{"sport": 0, "dport": 1}[k]] = uint16(p)
			}
		}
		if dir != 1 {
			return nil, fmt.Errorf("lab: conntrack line %q: want two tuples", line)
		}
		fl.Src, fl.Dst = netip.AddrPortFrom(addrs[0][0], ports[0][0]), netip.AddrPortFrom(addrs[0][1], ports[0][1])
		fl.ReplySrc, fl.ReplyDst = netip.AddrPortFrom(addrs[1][0], ports[1][0]), netip.AddrPortFrom(addrs[1][1], ports[1][1])
		flows = append(flows, fl)
	}
	return flows, nil
}

// Mapping returns the NAT's mapping of the flow from src to dst, if n
// holds one: the address and port dst sends its answers to.
func (n *Netns) Mapping(ctx context.Context, src, dst netip.AddrPort) (netip.AddrPort, bool, error) {
	flows, err := n.UDPFlows(ctx)
	if err != nil {
		return netip.AddrPort{}, false, err
	}
	for _, f := range flows {
		if f.Src == src && f.Dst == dst {
			return f.ReplyDst, true, nil
		}
	}
	return netip.AddrPort{}, false, nil
}
