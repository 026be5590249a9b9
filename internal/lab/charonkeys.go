package lab

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// CharonKeys are one Child SA's SPIs and keys as charon logs them with
// chd = 4 in its filelog (e2e/strongswan/strongswan.conf.tmpl sets it):
// with them a test can put its own ESP (Scapy) on the wire as charon
// would. The "initiator" keys protect what the initiator of the exchange
// that made the Child SA sends (RFC 7296 section 2.17), whichever side
// charon is. For an AEAD the encryption key is followed by its salt.
type CharonKeys struct {
	SPIIn, SPIOut  uint32 // charon's inbound ("_i") and outbound ("_o") SPI
	EncI, EncR     []byte
	IntegI, IntegR []byte
}

var (
	// "12[CHD] encryption initiator key => 20 bytes @ 0x7f..."
	charonKeyRE = regexp.MustCompile(`^(\d+)\[CHD\] (encryption|integrity) (initiator|responder) key => (\d+) bytes`)
	// "12[CHD]    0: D3 0A BC 28 ...  ascii"
	charonDumpRE = regexp.MustCompile(`^(\d+)\[CHD\]\s+\d+: (.*)$`)
	// "... CHILD_SA net{1} established with SPIs c1a2b3c4_i 0a0b0c0d_o ..."
	charonSPIRE = regexp.MustCompile(`^(\d+)\[\w+\] .*CHILD_SA \S+ established with SPIs ([0-9a-f]{8})_i ([0-9a-f]{8})_o`)
)

// ChildKeys reads charon's log and returns the Child SA whose outbound
// SPI is spiOut (the inbound SPI of its peer), or an error when the log
// has none yet. A thread logs the keys of a Child SA and then the line
// that says it is established.
func (c *Charon) ChildKeys(spiOut uint32) (*CharonKeys, error) {
	f, err := os.Open(c.Log())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type pending struct {
		k    CharonKeys
		dst  *[]byte // the key being dumped
		left int     // its bytes still to come
	}
	threads := map[string]*pending{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := charonKeyRE.FindStringSubmatch(line); m != nil {
			p := threads[m[1]]
			if p == nil {
				p = &pending{}
				threads[m[1]] = p
			}
			switch m[2] + " " + m[3] {
			case "encryption initiator":
				p.dst = &p.k.EncI
			case "encryption responder":
				p.dst = &p.k.EncR
			case "integrity initiator":
				p.dst = &p.k.IntegI
			default:
				p.dst = &p.k.IntegR
			}
			*p.dst = nil
			p.left, _ = strconv.Atoi(m[4])
			continue
		}
		if m := charonDumpRE.FindStringSubmatch(line); m != nil {
			p := threads[m[1]]
			if p == nil || p.left == 0 {
				continue
			}
			// The hex bytes come first, "XX " each, then the ASCII.
			s := m[2]
			for p.left > 0 && len(s) >= 2 {
				b, err := hex.DecodeString(s[:2])
				if err != nil {
					break
				}
				*p.dst = append(*p.dst, b[0])
				p.left--
				s = strings.TrimPrefix(s[2:], " ")
			}
			continue
		}
		if m := charonSPIRE.FindStringSubmatch(line); m != nil {
			p := threads[m[1]]
			delete(threads, m[1])
			in, _ := strconv.ParseUint(m[2], 16, 32)
			out, _ := strconv.ParseUint(m[3], 16, 32)
			if p != nil && uint32(out) == spiOut && len(p.k.EncI) > 0 && p.left == 0 {
				p.k.SPIIn, p.k.SPIOut = uint32(in), uint32(out)
				return &p.k, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("lab: no Child SA with outbound SPI %08x and its keys in %s (is chd = 4 set in the filelog?)", spiOut, c.Log())
}
