// Package control is the running gateway's control plane: a Unix socket
// that the sluice command line talks to (Listen and Serve; Dial for the
// client side), and a Prometheus endpoint (ServeMetrics). Both read the
// gateway through a Backend; GatewayBackend adapts a *gateway.Gateway.
//
// The socket protocol is line-delimited JSON. A client sends one request per
// line and reads one response per line, in order, on one connection:
//
//	{"op":"sa.list"}
//	{"ok":true,"result":[{"name":"a-to-b","tunnel":"to-b",...}]}
//	{"op":"sa.del","args":{"spi":4097}}
//	{"ok":false,"error":"sad: no inbound SA with SPI 0x1001"}
//
// The operations and their arguments:
//
//	sa.list      -                                []gateway.SAInfo
//	sa.add       {"tunnel":T,"dir":"in"|"out",    SAAddResult
//	              "sa":"<TOML of one [[sa]]>"}
//	sa.del       {"spi":N}                        SADelResult
//	tunnel.list  -                                []gateway.TunnelInfo
//	policy.list  -                                []gateway.PolicyInfo
//	stats        -                                gateway.Stats
//	reload       -                                ReloadResult
//	config.apply {"name":NAME,"config":"<TOML>",    ReloadResult
//	              "ticket_keys":[{"id":ID,
//	              "key":"<base64 of 32 bytes>",
//	              "issue":true}, ...]}
//	ike.list     -                                gateway.IKEInfo
//	ike.initiate {"name":CONNECTION}              IKEResult
//	ike.terminate {"name":CONNECTION}             IKEResult
//
// Lists are never null: an empty list is []. Unknown fields, in the request
// or its args, are errors, so that a misspelt argument is not ignored. A
// request longer than Options.MaxRequest, or one that does not arrive
// within Options.IdleTimeout, ends the connection.
//
// The socket is for the administrator: it is created with mode 0600, and a
// connection whose peer is neither root nor the server's own user is refused.
package control

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ha"
)

// DefaultSocket is where the control socket is unless configured otherwise.
const DefaultSocket = config.DefaultControlSocket

// The operations of the protocol.
const (
	OpSAList     = "sa.list"
	OpSAAdd      = "sa.add"
	OpSADel      = "sa.del"
	OpTunnelList = "tunnel.list"
	OpPolicyList = "policy.list"
	OpStats      = "stats"
	OpReload     = "reload"
	OpIKEList    = "ike.list"
	OpIKEInit    = "ike.initiate"
	OpIKETerm    = "ike.terminate"
	OpHAStatus   = "ha.status"
	OpHAHandover = "ha.handover"
	OpApply      = "config.apply"
)

// Ops lists every operation, in documentation order.
var Ops = []string{OpSAList, OpSAAdd, OpSADel, OpTunnelList, OpPolicyList, OpStats, OpReload, OpIKEList, OpIKEInit, OpIKETerm, OpHAStatus, OpHAHandover, OpApply}

// Request is one line a client sends.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response is one line the server sends back: OK with a Result (absent for
// operations that return nothing), or not OK with an Error.
type Response struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// SAAddArgs are the arguments of sa.add. SA is the text of an SA file that
// holds exactly one [[sa]] table; errors in it are reported with the file
// name "sa.add" and the line and column in SA.
type SAAddArgs struct {
	Tunnel string `json:"tunnel"`
	Dir    string `json:"dir"` // "in" adds an inbound SA; "out" switches the outbound SA
	SA     string `json:"sa"`
}

// SAAddResult is what sa.add installed.
type SAAddResult struct {
	Tunnel string `json:"tunnel"`
	Dir    string `json:"dir"`
	Name   string `json:"name,omitempty"`
	SPI    uint32 `json:"spi"`
}

// SADelArgs are the arguments of sa.del.
type SADelArgs struct {
	SPI uint32 `json:"spi"`
}

// SADelResult is what sa.del removed.
type SADelResult struct {
	SPI uint32 `json:"spi"`
}

// ReloadResult says what a reload changed, one line per change, in the
// order it made them (empty when the running state already was the file's).
type ReloadResult struct {
	Changes []string `json:"changes"`
}

// Limits of config.apply.
const (
	// MaxApplyConfig bounds ApplyArgs.Config.
	MaxApplyConfig = 4 << 20
	// MaxApplyName bounds ApplyArgs.Name.
	MaxApplyName = 256
	// MaxTicketKeys bounds ApplyArgs.TicketKeys.
	MaxTicketKeys = 16
	// MaxTicketKeyID bounds TicketKey.ID.
	MaxTicketKeyID = 128
)

// ApplyArgs are the arguments of config.apply: a whole gateway
// configuration sent over the socket instead of read from a file, so that
// its secrets ([[secret]] pre-shared keys, [[sa]] keys) never touch the
// node's disk. The gateway parses Config as it parses a file named Name
// (errors say Name:line:col: field, and relative paths in it are taken
// from Name's directory, as a file's are), then applies it as reload
// does. Name is at most MaxApplyName bytes of printable text ("" is
// "config.apply"), Config at most MaxApplyConfig bytes.
//
// Once a configuration was applied, it is the running one: reload, which
// re-reads the file the gateway started from, is refused until the
// gateway restarts, because that file lacks whatever was applied since.
// Neither the text nor its secrets are logged or repeated in errors.
type ApplyArgs struct {
	Name   string `json:"name"`
	Config string `json:"config"`
	// TicketKeys, if any, are the session ticket key ring every TLS
	// listener uses from now on, in place of its own rotation: exactly
	// one key with Issue set encrypts new tickets, all decrypt them. None
	// leaves the ring in force.
	TicketKeys []TicketKey `json:"ticket_keys,omitempty"`
}

// TicketKey is one session ticket key of config.apply's ring: an ID of
// the ring's owner's choosing (printable, unique in the ring; the
// gateway logs the IDs, never the keys), the 32-byte key, and whether new
// tickets are issued under it (else it only accepts them).
type TicketKey struct {
	ID    string `json:"id"`
	Key   []byte `json:"key"`
	Issue bool   `json:"issue,omitempty"`
}

// ApplyBackend is what a Backend that takes configurations over the
// socket (config.apply) adds.
type ApplyBackend interface {
	// Apply parses text as the configuration file name and applies it as
	// Reload does. ticketKeys, if not nil, is the session ticket key
	// ring, issuing key first. It returns what it changed.
	Apply(name, text string, ticketKeys [][32]byte) ([]string, error)
}

// IKEArgs are the arguments of ike.initiate and ike.terminate: the name
// of a [[connection]].
type IKEArgs struct {
	Name string `json:"name"`
}

// IKEResult is the connection ike.initiate negotiated or ike.terminate
// deleted.
type IKEResult struct {
	Name string `json:"name"`
}

// HAArgs are ha.handover's: the group to hand to the standby, "" for
// every group this member owns.
type HAArgs struct {
	Group string `json:"group,omitempty"`
}

// HATimeout bounds ha.handover.
const HATimeout = 30 * time.Second

// HABackend is what a Backend that is a member of a hot-standby pair adds
// (package ha): its status, and planned handovers.
type HABackend interface {
	// HAStatus returns the pair's status, or false without [ha].
	HAStatus() (ha.Status, bool)
	// HAHandover hands group ("" for all it owns) to the standby.
	HAHandover(ctx context.Context, group string) error
}

// IKETimeout bounds ike.initiate and ike.terminate: an answer comes
// within it, whatever the peer does (the write timeout of the socket
// follows).
const IKETimeout = 30 * time.Second

// Backend is what the server needs from a gateway. *gateway.Gateway serves
// it through GatewayBackend; tests use controltest.Backend. Every method
// may be called from several goroutines at once.
type Backend interface {
	SAs() []gateway.SAInfo
	Tunnels() []gateway.TunnelInfo
	Policies() []gateway.PolicyInfo
	Stats() gateway.Stats
	// AddSA installs sa on a running tunnel, as gateway.Gateway.AddSA.
	AddSA(tunnel, dir string, sa *config.SA) error
	// DelSA removes the inbound SA with the given SPI.
	DelSA(spi uint32) error
	// Reload re-reads the configuration file the gateway was started from
	// and applies it. An invalid file is refused with its errors and the
	// running configuration stays. It returns what it changed.
	Reload() ([]string, error)
	// IKE describes the IKE connections; InitiateIKE and TerminateIKE
	// negotiate and delete one, waiting up to ctx.
	IKE() gateway.IKEInfo
	InitiateIKE(ctx context.Context, name string) error
	TerminateIKE(ctx context.Context, name string) error
}
