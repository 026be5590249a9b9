package cli

// sluice pcap encrypt|decrypt: ESP over the packets of a capture file,
// offline, through the same SA runtime and crypto engines as the gateway.
//
//  1. Read: one record at a time (pcap or pcapng); find the IP packet in the
//     frame (Ethernet with VLAN tags, raw IP, Linux cooked capture) and copy
//     it into a pooled buffer with headroom. Packets that cannot go through
//     ESP (not IP, cut by the snap length; for decrypt: not ESP, IKE,
//     keepalives, unknown SPI or destination) are counted and dropped here.
//  2. Crypto: batches of up to pcapBatch packets go through an esp.Pipeline
//     on the chosen engine; with an asynchronous engine several batches are
//     in flight while the next one is read.
//  3. Write, in capture order: each packet that made it, with its original
//     timestamp, behind the input frame's Ethernet header (addresses and
//     VLAN tags kept, EtherType set for the new IP version) or as raw IP.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	_ "github.com/sluicegw/sluice/cryptodev/soft" // the engines --engine can name
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/pcap"
)

// Shape of the pcap commands' packet memory.
const (
	// pcapBatch is the number of packets per crypto batch.
	pcapBatch = 64
	// pcapAsyncDepth is the number of batches in flight on an asynchronous
	// engine; a synchronous one completes each batch as it is submitted.
	pcapAsyncDepth = 4
	// pcapHeadroom covers the most ESP adds in front (outer IPv6, UDP, ESP
	// header, CBC IV) and an output Ethernet header with two VLAN tags.
	pcapHeadroom = 128
	// pcapMaxIP is the largest IP packet: an IPv6 packet with a 65535-byte
	// payload (IPv4 total length stops at 65535).
	pcapMaxIP = packet.IPv6Header + 0xffff
	// pcapSlot is one buffer: headroom, the largest IP packet, and the most
	// ESP adds behind it.
	pcapSlot = pcapHeadroom + pcapMaxIP + 64
)

func init() {
	if esp.MaxHeadroom+pcap.MaxLinkHeader > pcapHeadroom || esp.MaxTailroom > pcapSlot-pcapHeadroom-pcapMaxIP {
		panic("cli: pcap buffers too small for ESP overhead")
	}
	commands = append(commands, newPcapCommand)
}

// pcapOptions are the flags and arguments of pcap encrypt and decrypt.
type pcapOptions struct {
	dir     esp.Direction
	saFile  string
	spi     uint32
	spiSet  bool
	engine  string
	strict  bool
	json    bool
	in, out string
}

func newPcapCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pcap",
		Short: "Encrypt or decrypt the packets of a capture file with ESP",
		Long: `Encrypt or decrypt the packets of a capture file (pcap or pcapng) with the
SAs of an SA file, offline, through the same ESP code and crypto engines as
the gateway. The output is a pcap file with the input's timestamps.`,
	}
	cmd.AddCommand(newPcapSubcommand(e, esp.Inbound), newPcapSubcommand(e, esp.Outbound))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErr("unknown command %q for %q (want encrypt or decrypt)", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
	return cmd
}

func newPcapSubcommand(e *env, dir esp.Direction) *cobra.Command {
	o := &pcapOptions{dir: dir}
	cmd := &cobra.Command{Args: cobra.ExactArgs(2)}
	if dir == esp.Inbound {
		cmd.Use = "decrypt --sa FILE [flags] IN OUT"
		cmd.Short = "Decrypt the ESP packets of a capture"
		cmd.Long = `Decrypt the ESP packets of capture IN (IP protocol 50, or ESP in UDP on the
SA file's UDP ports and 4500) and write the inner packets to OUT: in tunnel
mode the inner IP packet, in transport mode the IP packet rebuilt around the
payload. Each packet's SA is found by SPI and, where the SA names one, by
destination address; every SA of the file is used inbound, its seq seeding
the anti-replay window. Other packets (IKE, NAT keepalives, other traffic)
are counted as dropped, with their reason, and not written.

A summary goes to stderr: "decrypted N, dropped M (reason: count, ...)".
Exit status: 0; 1 with --strict when a packet was dropped; 2 for bad input.`
	} else {
		cmd.Use = "encrypt --sa FILE [--spi N] [flags] IN OUT"
		cmd.Short = "Encrypt the IP packets of a capture"
		cmd.Long = `Encrypt the IP packets of capture IN with one SA, used outbound, and write the
ESP packets to OUT. --spi chooses the SA; without it the SA file must hold
exactly one. A tunnel-mode SA needs src and dst (the outer addresses); a
transport-mode SA protects each packet between its own addresses. The SA's
seq is the last sequence number already sent.

A summary goes to stderr: "encrypted N, dropped M (reason: count, ...)".
Exit status: 0; 1 with --strict when a packet was dropped; 2 for bad input.`
	}
	f := cmd.Flags()
	f.StringVar(&o.saFile, "sa", "", "SA file (TOML, [[sa]] tables)")
	f.StringVar(&o.engine, "engine", "soft", "crypto engine (registered: "+strings.Join(cryptodev.Engines(), ", ")+")")
	f.BoolVar(&o.strict, "strict", false, "exit with status 1 if any packet was dropped")
	f.BoolVar(&o.json, "json", false, `also print the summary as JSON on stdout: {"processed":N,"ok":N,"dropped":{"reason":count}}`)
	if dir == esp.Outbound {
		f.Uint32Var(&o.spi, "spi", 0, "SPI of the SA to encrypt with (decimal or 0x hex); needed when the SA file has several")
	}
	cmd.MarkFlagRequired("sa")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.in, o.out = args[0], args[1]
		o.spiSet = dir == esp.Outbound && cmd.Flags().Changed("spi")
		return runPcap(cmd.Context(), e, o)
	}
	return cmd
}

// usageErr is a bad-input error: exit status 2.
func usageErr(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// runPcap runs one pcap command.
func runPcap(ctx context.Context, e *env, o *pcapOptions) error {
	if o.out == "-" && o.json {
		return usageErr("--json writes to stdout: OUT cannot be - as well")
	}
	cfgs, err := config.LoadSAFile(o.saFile)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	if len(cfgs) == 0 {
		return usageErr("%s: no SAs (the file has no [[sa]] tables)", o.saFile)
	}
	if o.dir == esp.Outbound {
		if cfgs, err = chooseOutboundSA(cfgs, o); err != nil {
			return err
		}
	}

	eng, err := cryptodev.Open(o.engine)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer eng.Close()
	q, err := eng.NewQueue()
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer q.Close()

	j := &pcapJob{dir: o.dir, pl: esp.NewPipeline(q), bySPI: map[uint32][]*esp.SA{}}
	// Deferred calls run last in, first out: drain before destroying the
	// keys that batches in flight still use.
	defer func() { destroyKeys(j.sas) }()
	defer j.drain()
	if err := j.openSAs(eng, cfgs); err != nil {
		return withCode(ExitUsage, err)
	}

	in, closeIn, err := openInput(e, o.in)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer closeIn()
	rd, err := pcap.NewReader(in, displayName(o.in))
	if err != nil {
		return withCode(ExitUsage, err)
	}
	if lt := rd.LinkType(); lt != 0 && !lt.Supported() {
		return usageErr("%s: unsupported link type %v (supported: %s)", displayName(o.in), lt, pcap.SupportedLinkTypes)
	}
	j.outLink = pcap.LinkRaw
	if rd.LinkType() == pcap.LinkEthernet {
		j.outLink = pcap.LinkEthernet
	}

	outFile, err := createOutput(e, o.in, o.out)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	j.w, err = pcap.NewWriter(outFile, j.outLink, rd.Resolution() < time.Microsecond)
	if err == nil {
		depth := 1
		if eng.Async() {
			depth = pcapAsyncDepth
		}
		j.setup(depth)
		err = j.run(ctx, rd)
	}
	if ferr := j.finish(outFile); err == nil && ferr != nil {
		err = ferr
	}
	j.report(e, o)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	if o.strict && j.sum.dropped() > 0 {
		return withCode(ExitDropped, fmt.Errorf("%d of %d packets dropped (--strict)", j.sum.dropped(), j.sum.processed))
	}
	return nil
}

// chooseOutboundSA picks the SA encrypt uses: the one with --spi, or the
// only one.
func chooseOutboundSA(cfgs []config.SA, o *pcapOptions) ([]config.SA, error) {
	if !o.spiSet {
		if len(cfgs) > 1 {
			return nil, usageErr("%s has %d SAs: choose one with --spi", o.saFile, len(cfgs))
		}
		return cfgs, nil
	}
	var found []config.SA
	for _, c := range cfgs {
		if c.SPI == o.spi {
			found = append(found, c)
		}
	}
	switch len(found) {
	case 0:
		return nil, usageErr("%s has no SA with SPI %d (0x%x)", o.saFile, o.spi, o.spi)
	case 1:
		return found, nil
	}
	return nil, usageErr("%s has %d SAs with SPI 0x%x (distinct dst); encrypt needs one", o.saFile, len(found), o.spi)
}

func displayName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// openInput opens IN ("-" is stdin).
func openInput(e *env, path string) (io.Reader, func(), error) {
	if path == "-" {
		return e.stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// outputFile is where the capture goes: a file or stdout.
type outputFile struct {
	w io.Writer
	f *os.File // nil for stdout
}

// createOutput creates OUT ("-" is stdout), refusing to overwrite IN.
func createOutput(e *env, in, out string) (*outputFile, error) {
	if out == "-" {
		return &outputFile{w: e.stdout}, nil
	}
	if in != "-" {
		si, err1 := os.Stat(in)
		so, err2 := os.Stat(out)
		if err1 == nil && err2 == nil && os.SameFile(si, so) {
			return nil, fmt.Errorf("%s: output is the input file", out)
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	return &outputFile{w: f, f: f}, nil
}

func (o *outputFile) Write(p []byte) (int, error) { return o.w.Write(p) }

// pcapBatchCtx is one batch and what the command keeps beside each of its
// packets.
type pcapBatchCtx struct {
	b    *esp.Batch
	bufs []*packet.Buf // pcapBatch buffers, owned by this batch for the whole run
	meta []pcapMeta
	n    int
}

// pcapMeta is what a packet's output needs besides its data.
type pcapMeta struct {
	time time.Time
	hdr  [pcap.MaxLinkHeader]byte // input Ethernet header, for Ethernet output
	hl   uint8                    // 0: none (the output frame gets zero addresses)
}

// pcapJob is one run of encrypt or decrypt. It is used by one goroutine,
// which therefore owns the SAs' sequence numbers and replay windows.
type pcapJob struct {
	dir     esp.Direction
	pl      *esp.Pipeline
	sas     []*esp.SA
	outSA   *esp.SA              // encrypt
	bySPI   map[uint32][]*esp.SA // decrypt: SAs by SPI; a valid Dst must match
	natt    []uint16             // decrypt: UDP ports of ESP-in-UDP
	outLink pcap.LinkType
	w       *pcap.Writer
	pool    *packet.Pool
	free    []*pcapBatchCtx
	inFly   []*pcapBatchCtx // submitted, oldest first
	depth   int             // batches allowed in flight
	cur     *pcapBatchCtx
	sum     pcapSummary
	werr    error // first write error
}

// openSAs makes the runtime of every SA for the job's direction.
func (j *pcapJob) openSAs(eng cryptodev.Engine, cfgs []config.SA) error {
	ports := map[uint16]bool{esp.NATTPort: true}
	for i := range cfgs {
		sa, err := gateway.OpenSA(eng, &cfgs[i], j.dir)
		if err != nil {
			return err
		}
		j.sas = append(j.sas, sa)
		if j.dir == esp.Outbound {
			j.outSA = sa
			continue
		}
		j.bySPI[sa.SPI()] = append(j.bySPI[sa.SPI()], sa)
		if cfgs[i].Encap == config.EncapUDP {
			ports[cfgs[i].SPort], ports[cfgs[i].DPort] = true, true
		}
	}
	for p := range ports {
		if p != 0 {
			j.natt = append(j.natt, p)
		}
	}
	return nil
}

// destroyKeys destroys the engine keys of SAs whose batches have all
// completed.
func destroyKeys(sas []*esp.SA) {
	for _, sa := range sas {
		if k := sa.Config().Key; k != nil {
			k.Destroy()
		}
	}
}

// setup allocates depth batches and their buffers.
func (j *pcapJob) setup(depth int) {
	j.depth = depth
	j.pool = packet.NewPool(depth*pcapBatch, pcapSlot, pcapHeadroom)
	for range depth {
		c := &pcapBatchCtx{b: esp.NewBatch(pcapBatch), bufs: make([]*packet.Buf, pcapBatch), meta: make([]pcapMeta, pcapBatch)}
		j.pool.GetN(c.bufs)
		j.free = append(j.free, c)
	}
}

// run reads the capture to its end or its first error.
func (j *pcapJob) run(ctx context.Context, rd *pcap.Reader) error {
	var p pcap.Packet
	for {
		err := rd.Next(&p)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err // finish writes what was read before
		}
		if !p.Link.Supported() {
			return fmt.Errorf("%s: record %d: unsupported link type %v (supported: %s)", rd.Name(), p.Record, p.Link, pcap.SupportedLinkTypes)
		}
		j.sum.processed++
		if err := j.add(&p); err != nil {
			return err
		}
		if j.cur != nil && j.cur.n == pcapBatch {
			if err := ctx.Err(); err != nil {
				return err
			}
			j.submit()
		}
		if j.werr != nil {
			return j.werr
		}
	}
	j.submit()
	return j.werr
}

// add takes one captured packet into the current batch, or counts its
// drop.
func (j *pcapJob) add(p *pcap.Packet) error {
	hdr, ip, ok := pcap.SplitFrame(p.Link, p.Data)
	if !ok {
		j.sum.drop(dropNotIP)
		return nil
	}
	if n := ipExtent(ip); n >= 0 && n < len(ip) {
		ip = ip[:n] // link-layer padding or FCS behind the packet
	} else if n > len(ip) && p.OrigLen > len(p.Data) {
		j.sum.drop(dropSnapLen)
		return nil
	}
	if j.cur == nil {
		if len(j.free) == 0 {
			j.completeOldest()
		}
		j.cur = j.free[len(j.free)-1]
		j.free = j.free[:len(j.free)-1]
		j.cur.n = 0
		j.cur.b.Reset(j.dir, pcapBatch)
	}
	c, i := j.cur, j.cur.n
	buf := c.bufs[i]
	if !buf.Write(pcapHeadroom, ip) {
		j.sum.dropESP(esp.ReasonNoRoom) // unreachable for IP packets, which are at most pcapMaxIP
		return nil
	}
	var sa *esp.SA
	if j.dir == esp.Inbound {
		pp := &c.b.Parsed[i]
		if r := esp.Parse(buf.Bytes(), j.natt, pp); r != esp.ReasonNone {
			j.sum.dropESP(r)
			return nil
		}
		if sa = j.lookup(pp.SPI, pp.Dst); sa == nil {
			j.sum.dropESP(esp.ReasonUnknownSPI)
			return nil
		}
	} else {
		sa = j.outSA
	}
	c.b.Bufs[i], c.b.SAs[i], c.b.Reasons[i] = buf, sa, esp.ReasonNone
	m := &c.meta[i]
	m.time, m.hl = p.Time, 0
	if p.Link == pcap.LinkEthernet && j.outLink == pcap.LinkEthernet {
		m.hl = uint8(copy(m.hdr[:], hdr))
	}
	c.n++
	return nil
}

// lookup finds the inbound SA for (dst, spi).
func (j *pcapJob) lookup(spi uint32, dst netip.Addr) *esp.SA {
	for _, sa := range j.bySPI[spi] {
		if d := sa.Config().Dst; !d.IsValid() || d == dst {
			return sa
		}
	}
	return nil
}

// ipExtent is the length the IP header at the start of b announces, or -1
// if b is too short to say.
func ipExtent(b []byte) int {
	switch packet.IPVersion(b) {
	case 4:
		if len(b) >= packet.IPv4MinHeader {
			return int(packet.IPv4(b).TotalLength())
		}
	case 6:
		if len(b) >= packet.IPv6Header {
			return packet.IPv6Header + int(packet.IPv6(b).PayloadLength())
		}
	}
	return -1
}

// submit hands the current batch to the pipeline, writing whatever
// completes.
func (j *pcapJob) submit() {
	c := j.cur
	if c == nil {
		return
	}
	j.cur = nil
	if c.n == 0 {
		j.free = append(j.free, c)
		return
	}
	for len(j.inFly) >= j.depth {
		j.completeOldest()
	}
	b := c.b // filled by add from index 0; cut it to the packets taken
	b.Bufs, b.SAs, b.Parsed, b.Reasons = b.Bufs[:c.n], b.SAs[:c.n], b.Parsed[:c.n], b.Reasons[:c.n]
	if err := j.pl.Submit(b); err != nil {
		// The engine refused the batch. Submit has prepared its packets
		// already (sequence numbers taken, headers written), so it cannot be
		// retried: they are dropped as queue_full, and the batch is
		// complete. Write the batches before it first, and keep fewer in
		// flight from now on.
		j.depth = max(1, len(j.inFly))
		j.drain()
		j.write(c)
		return
	}
	j.inFly = append(j.inFly, c)
	for len(j.inFly) > 0 {
		b := j.pl.Complete(false)
		if b == nil {
			break
		}
		j.completed(b)
	}
}

// completeOldest waits for the oldest batch in flight and writes it.
func (j *pcapJob) completeOldest() {
	b := j.pl.Complete(true)
	if b == nil {
		panic("cli: no batch in flight to wait for")
	}
	j.completed(b)
}

// completed writes the batch the pipeline returned, which is always the
// oldest in flight.
func (j *pcapJob) completed(b *esp.Batch) {
	c := j.inFly[0]
	if c.b != b {
		panic("cli: pipeline returned batches out of order")
	}
	j.inFly = j.inFly[1:]
	j.write(c)
}

// drain waits for every batch in flight and writes it.
func (j *pcapJob) drain() {
	for len(j.inFly) > 0 {
		b := j.pl.Complete(true)
		if b == nil { // the engine lost them: count them
			for _, c := range j.inFly {
				for i := range c.n {
					c.b.Reasons[i] = esp.ReasonCryptoError
				}
				j.write(c)
			}
			j.inFly = nil
			return
		}
		j.completed(b)
	}
}

// write writes the packets of a completed batch that made it, counts the
// others, and frees the batch.
func (j *pcapJob) write(c *pcapBatchCtx) {
	for i := range c.n {
		if r := c.b.Reasons[i]; r != esp.ReasonNone {
			j.sum.dropESP(r)
			continue
		}
		j.sum.ok++
		if j.werr != nil {
			continue
		}
		p := c.b.Bufs[i]
		if j.outLink == pcap.LinkEthernet {
			m := &c.meta[i]
			v := packet.IPVersion(p.Bytes())
			var hdr []byte
			if m.hl == 0 {
				hdr = p.Prepend(14) // from a non-Ethernet interface: no addresses to keep
				clear(hdr)
			} else {
				hdr = p.Prepend(int(m.hl))
				copy(hdr, m.hdr[:m.hl])
			}
			pcap.SetEtherType(hdr, v)
		}
		j.werr = j.w.WritePacket(c.meta[i].time, p.Bytes())
	}
	c.n = 0
	j.free = append(j.free, c)
}

// finish writes the packets still in the pipeline (those read before an
// error included), then flushes and closes the output.
func (j *pcapJob) finish(out *outputFile) error {
	j.submit()
	j.drain()
	var err error
	if j.w != nil {
		err = j.w.Flush()
	}
	if out.f != nil {
		if cerr := out.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// report prints the summary: a line on stderr, and with --json an object on
// stdout.
func (j *pcapJob) report(e *env, o *pcapOptions) {
	verb := "decrypted"
	if o.dir == esp.Outbound {
		verb = "encrypted"
	}
	fmt.Fprintln(e.stderr, j.sum.line(verb))
	if o.json {
		fmt.Fprintln(e.stdout, j.sum.json())
	}
}

// Drops the pcap commands count before ESP sees a packet.
const (
	dropNotIP   = iota // the frame carries no IPv4 or IPv6 packet (ARP, LLDP, ...)
	dropSnapLen        // the capture's snap length cut the IP packet short
	numLinkDrops
)

var linkDropNames = [numLinkDrops]string{dropNotIP: "not_ip", dropSnapLen: "snaplen"}

// pcapSummary counts packets by outcome.
type pcapSummary struct {
	processed, ok uint64
	link          [numLinkDrops]uint64
	esp           [esp.NumReasons]uint64
}

func (s *pcapSummary) drop(r int)           { s.link[r]++ }
func (s *pcapSummary) dropESP(r esp.Reason) { s.esp[r]++ }

func (s *pcapSummary) dropped() uint64 {
	var n uint64
	for _, v := range s.link {
		n += v
	}
	for _, v := range s.esp {
		n += v
	}
	return n
}

// reasonCount is one entry of the summary.
type reasonCount struct {
	name  string
	count uint64
}

// reasons lists the non-zero drop counters in a stable order: the
// link-layer reasons, then esp's in the order esp declares them.
func (s *pcapSummary) reasons() []reasonCount {
	var out []reasonCount
	for r, v := range s.link {
		if v != 0 {
			out = append(out, reasonCount{linkDropNames[r], v})
		}
	}
	for r := esp.ReasonNone + 1; r < esp.NumReasons; r++ {
		if v := s.esp[r]; v != 0 {
			out = append(out, reasonCount{r.String(), v})
		}
	}
	return out
}

// line is "decrypted N, dropped M (reason: count, ...)", without the
// parenthesis when nothing was dropped.
func (s *pcapSummary) line(verb string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d, dropped %d", verb, s.ok, s.dropped())
	if rs := s.reasons(); len(rs) > 0 {
		b.WriteString(" (")
		for i, r := range rs {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s: %d", r.name, r.count)
		}
		b.WriteByte(')')
	}
	return b.String()
}

// json is {"processed":N,"ok":N,"dropped":{"reason":count,...}}, the
// reasons in the same order as line's.
func (s *pcapSummary) json() string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"processed":%d,"ok":%d,"dropped":{`, s.processed, s.ok)
	for i, r := range s.reasons() {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(r.name)
		b.Write(name)
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(r.count, 10))
	}
	b.WriteString("}}")
	return b.String()
}
