//go:build ignore

// Command gen writes the sample captures of testdata/pcap with sluice's own
// encrypt path (sluice pcap encrypt):
//
//	sample.sa.toml     one AES-GCM-128 tunnel SA, 192.0.2.1 -> 192.0.2.2
//	sample-plain.pcap  six ICMP echo requests 10.1.0.1 -> 10.2.0.1 (Ethernet)
//	sample-esp.pcap    the same, encrypted, with the second packet replayed
//	                   after the third and the fifth one tampered with
//
// Decrypting sample-esp.pcap gives echo requests 1, 2, 3, 4 and 6 and
// "decrypted 5, dropped 2 (replay: 1, auth_failed: 1)"; cli's
// TestSampleCapture checks it. Run from the module root:
//
//	go run testdata/pcap/gen/main.go
//
// The outer IPv4 IDs are random, so each run writes different bytes with
// the same meaning.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicegw/sluice/cli"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/pcap"
)

const saFile = `# The SA of testdata/pcap/sample-esp.pcap (written by testdata/pcap/gen).
# Decrypt:  sluice pcap decrypt --sa testdata/pcap/sample.sa.toml testdata/pcap/sample-esp.pcap out.pcap
# Encrypt:  sluice pcap encrypt --sa testdata/pcap/sample.sa.toml testdata/pcap/sample-plain.pcap out.pcap

[[sa]]
name = "sample"
spi = 0x00001001
src = "192.0.2.1"
dst = "192.0.2.2"
mode = "tunnel"
esp = "aes128gcm16"
# AES-128 key, then the 4-byte salt (RFC 4106 section 8.1)
enc_key = "0x4a6f7920746f20746865207061636b657473cafe"
replay_window = 64
`

// Echo requests: identifier 0x534c ("SL"), sequence numbers 1..6, and a
// 32-byte payload "sluice sample echo NN" padded with dots.
const (
	echoID = 0x534c
	echoes = 6
)

var (
	base   = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	macSrc = []byte{0x02, 0, 0, 0, 0, 0x01}
	macDst = []byte{0x02, 0, 0, 0, 0, 0x02}
	inSrc  = netip.MustParseAddr("10.1.0.1")
	inDst  = netip.MustParseAddr("10.2.0.1")
)

func payload(seq int) []byte {
	p := []byte(fmt.Sprintf("sluice sample echo %02d", seq))
	for len(p) < 32 {
		p = append(p, '.')
	}
	return p
}

// echoRequest builds the Ethernet frame of echo request seq.
func echoRequest(seq int) []byte {
	pl := payload(seq)
	ipLen := packet.IPv4MinHeader + 8 + len(pl)
	f := make([]byte, 14+ipLen)
	copy(f[0:], macDst)
	copy(f[6:], macSrc)
	binary.BigEndian.PutUint16(f[12:], pcap.EtherTypeIPv4)
	ip := f[14:]
	packet.IPv4(ip).Encode(&packet.IPv4Fields{Length: uint16(ipLen), ID: uint16(0x100 + seq), DF: true, TTL: 64,
		Protocol: packet.ProtoICMP, Src: inSrc.As4(), Dst: inDst.As4()})
	icmp := ip[packet.IPv4MinHeader:]
	icmp[0] = 8 // echo request
	binary.BigEndian.PutUint16(icmp[4:], echoID)
	binary.BigEndian.PutUint16(icmp[6:], uint16(seq))
	copy(icmp[8:], pl)
	binary.BigEndian.PutUint16(icmp[2:], ^packet.Checksum(icmp, 0))
	return f
}

func main() {
	dir := flag.String("dir", "testdata/pcap", "directory to write the samples to")
	flag.Parse()
	sa := filepath.Join(*dir, "sample.sa.toml")
	plain := filepath.Join(*dir, "sample-plain.pcap")
	if err := os.WriteFile(sa, []byte(saFile), 0o644); err != nil {
		log.Fatal(err)
	}

	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf, pcap.LinkEthernet, false)
	check(err)
	for seq := 1; seq <= echoes; seq++ {
		check(w.WritePacket(base.Add(time.Duration(seq)*time.Second), echoRequest(seq)))
	}
	check(w.Flush())
	check(os.WriteFile(plain, buf.Bytes(), 0o644))

	// Encrypt with sluice itself.
	tmp, err := os.CreateTemp("", "sample-esp-*.pcap")
	check(err)
	tmp.Close()
	defer os.Remove(tmp.Name())
	var stderr bytes.Buffer
	if code := cli.Run(context.Background(), []string{"pcap", "encrypt", "--sa", sa, plain, tmp.Name()}, nil, io.Discard, &stderr); code != 0 {
		log.Fatalf("encrypt: exit %d: %s", code, stderr.String())
	}
	f, err := os.Open(tmp.Name())
	check(err)
	defer f.Close()
	rd, err := pcap.NewReader(f, tmp.Name())
	check(err)
	var esp [][]byte
	for {
		var p pcap.Packet
		if err := rd.Next(&p); err == io.EOF {
			break
		} else {
			check(err)
		}
		esp = append(esp, bytes.Clone(p.Data))
	}
	if len(esp) != echoes {
		log.Fatalf("encrypt gave %d packets, want %d", len(esp), echoes)
	}

	// 1, 2, 3, 2 again (replayed), 4, 5 with a flipped ciphertext bit, 6.
	tampered := bytes.Clone(esp[4])
	tampered[len(tampered)-20] ^= 0x01
	order := [][]byte{esp[0], esp[1], esp[2], esp[1], esp[3], tampered, esp[5]}
	buf.Reset()
	w, err = pcap.NewWriter(&buf, pcap.LinkEthernet, false)
	check(err)
	for i, frame := range order {
		check(w.WritePacket(base.Add(time.Duration(i+1)*time.Second+500*time.Millisecond), frame))
	}
	check(w.Flush())
	check(os.WriteFile(filepath.Join(*dir, "sample-esp.pcap"), buf.Bytes(), 0o644))
	fmt.Fprintf(os.Stderr, "wrote %s, %s and sample-esp.pcap (%s)\n", sa, plain, stderr.String())
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
