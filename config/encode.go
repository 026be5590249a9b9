package config

// encode.go writes gateway configurations: File is a configuration as the
// file spells it, and Encode turns it into TOML that ParseGateway reads.
// Programs that make configurations (the demo, the benches, the lab, the
// fleet's agent) build a File instead of formatting TOML by hand, so that
// a value is always quoted and escaped as TOML wants it and cannot add
// keys of its own.
//
// A parsed configuration becomes a File again by the rule tables that
// read it (rules.go): Gateway.ToFile, and ToFile of each section's model.
//
// The types hold what the file holds, as strings where the file has
// strings ("10.1.0.1/24", "100ms", "aes128gcm16"): Encode checks nothing
// of their meaning, which is ParseGateway's business. Every key is
// omitted when its field is the zero value, so a zero field means "the
// default". The few keys whose default is not the zero value and whose
// zero value means something else (gso, gro, ipv6_only,
// session_tickets, replay_window) are pointers: nil leaves them out.

import (
	"bytes"
	"fmt"
	"reflect"
	"unicode/utf8"

	toml "github.com/pelletier/go-toml/v2"
)

// File is a gateway configuration as written: one field for each section
// of the file (see gateway.go), in the file's order.
type File struct {
	Gateway     FileGateway      `toml:"gateway,omitempty"`
	TUN         *FileTUN         `toml:"tun,omitempty"`
	UDP         *FileUDP         `toml:"udp,omitempty"`
	RawESP      *FileRawESP      `toml:"rawesp,omitempty"`
	Tunnels     []FileTunnel     `toml:"tunnel,omitempty"`
	Policies    []FilePolicy     `toml:"policy,omitempty"`
	SAs         []FileSA         `toml:"sa,omitempty"`
	IKE         *FileIKE         `toml:"ike,omitempty"`
	Connections []FileConnection `toml:"connection,omitempty"`
	Pools       []FilePool       `toml:"pool,omitempty"`
	Secrets     []FileSecret     `toml:"secret,omitempty"`
	TLS         []FileTLS        `toml:"tls,omitempty"`
	TLSOrigins  []FileTLSOrigin  `toml:"tls_origin,omitempty"`
	HA          *FileHA          `toml:"ha,omitempty"`
}

// FileGateway is the [gateway] section.
type FileGateway struct {
	Workers       int               `toml:"workers,omitempty"`
	Engine        string            `toml:"engine,omitempty"`
	ControlSocket string            `toml:"control_socket,omitempty"`
	Metrics       string            `toml:"metrics,omitempty"`
	LogLevel      string            `toml:"log_level,omitempty"`
	LogFormat     string            `toml:"log_format,omitempty"`
	LogLevels     map[string]string `toml:"log_levels,omitempty"` // subsystem to level
	Oversize      string            `toml:"oversize,omitempty"`
	StateDir      string            `toml:"state_dir,omitempty"`
}

// FileTUN is the [tun] section.
type FileTUN struct {
	Name      string   `toml:"name,omitempty"`
	MTU       int      `toml:"mtu,omitempty"`
	Addresses []string `toml:"addresses,omitempty"` // "10.1.0.1/24"
	Queues    int      `toml:"queues,omitempty"`
}

// FileUDP is the [udp] section. GSO and GRO are on unless set to false;
// Link is "auto" when empty.
type FileUDP struct {
	Listen string `toml:"listen,omitempty"` // "0.0.0.0:4500"
	GSO    *bool  `toml:"gso,omitempty"`
	GRO    *bool  `toml:"gro,omitempty"`
	Link   string `toml:"link,omitempty"` // "auto" (the default), "xdp" or "socket"
}

// FileRawESP is the [rawesp] section.
type FileRawESP struct {
	Listen string `toml:"listen,omitempty"` // an address, no port
}

// FileTunnel is a [[tunnel]].
type FileTunnel struct {
	Name     string   `toml:"name,omitempty"`
	Local    string   `toml:"local,omitempty"`
	Peer     string   `toml:"peer,omitempty"`
	Encap    string   `toml:"encap,omitempty"` // "udp" (default) or "none"
	PeerPort int      `toml:"peer_port,omitempty"`
	Remote   []string `toml:"remote,omitempty"` // routed prefixes
	Out      string   `toml:"out,omitempty"`
	In       []string `toml:"in,omitempty"`
	Engine   string   `toml:"engine,omitempty"`
	MTU      int      `toml:"mtu,omitempty"`
}

// FilePolicy is a [[policy]]. Proto is a name ("tcp") or a number as a
// string; SPort and DPort are "any", a port ("443") or a range
// ("1024-65535").
type FilePolicy struct {
	Name   string `toml:"name,omitempty"`
	Src    string `toml:"src,omitempty"`
	Dst    string `toml:"dst,omitempty"`
	Proto  string `toml:"proto,omitempty"`
	SPort  string `toml:"sport,omitempty"`
	DPort  string `toml:"dport,omitempty"`
	Action string `toml:"action,omitempty"`
	Tunnel string `toml:"tunnel,omitempty"`
}

// FileSA is an [[sa]], in the SA file's syntax. EncKey and AuthKey are
// hex. ReplayWindow nil is the default (DefaultReplayWindow); 0 turns
// anti-replay off.
type FileSA struct {
	Name         string `toml:"name,omitempty"`
	SPI          uint32 `toml:"spi,omitempty"`
	Src          string `toml:"src,omitempty"`
	Dst          string `toml:"dst,omitempty"`
	Mode         string `toml:"mode,omitempty"`
	Encap        string `toml:"encap,omitempty"`
	SPort        int    `toml:"sport,omitempty"`
	DPort        int    `toml:"dport,omitempty"`
	ESP          string `toml:"esp,omitempty"`
	EncKey       string `toml:"enc_key,omitempty"`
	AuthKey      string `toml:"auth_key,omitempty"`
	ESN          bool   `toml:"esn,omitempty"`
	ReplayWindow *int   `toml:"replay_window,omitempty"`
	Seq          int64  `toml:"seq,omitempty"`
}

// FileIKE is the [ike] section; durations are strings such as "1s"
// (KeepAlive "0s" turns NAT keepalives off).
type FileIKE struct {
	Port              int    `toml:"port,omitempty"`
	RetransmitTimeout string `toml:"retransmit_timeout,omitempty"`
	RetransmitTries   int    `toml:"retransmit_tries,omitempty"`
	MaxChildSAs       int    `toml:"max_child_sas,omitempty"`
	BlockThreshold    int    `toml:"block_threshold,omitempty"`
	KeepAlive         string `toml:"keep_alive,omitempty"`
}

// FileConnection is a [[connection]], named as in swanctl.conf.
type FileConnection struct {
	Name        string      `toml:"name,omitempty"`
	Version     int         `toml:"version,omitempty"`
	LocalAddrs  []string    `toml:"local_addrs,omitempty"`
	RemoteAddrs []string    `toml:"remote_addrs,omitempty"`
	Proposals   string      `toml:"proposals,omitempty"`
	DPDDelay    string      `toml:"dpd_delay,omitempty"`
	Encap       bool        `toml:"encap,omitempty"`
	RekeyTime   string      `toml:"rekey_time,omitempty"`
	OverTime    string      `toml:"over_time,omitempty"`
	ReauthTime  string      `toml:"reauth_time,omitempty"` // "0s": none (the default)
	MOBIKE      *bool       `toml:"mobike,omitempty"`      // nil: the default, true
	Pools       []string    `toml:"pools,omitempty"`
	VIPs        []string    `toml:"vips,omitempty"` // "0.0.0.0", "::" or an address
	Local       FileAuth    `toml:"local,omitempty"`
	Remote      FileAuth    `toml:"remote,omitempty"`
	Children    []FileChild `toml:"children,omitempty"`
}

// FileAuth is [connection.local] or [connection.remote].
type FileAuth struct {
	Auth       string   `toml:"auth,omitempty"` // "psk", "pubkey"; remotely also "eap-mschapv2", "eap-tls", "eap"
	ID         string   `toml:"id,omitempty"`
	EAPID      string   `toml:"eap_id,omitempty"`
	Certs      []string `toml:"certs,omitempty"`
	CACerts    []string `toml:"cacerts,omitempty"`
	CRLs       []string `toml:"crls,omitempty"`
	Revocation string   `toml:"revocation,omitempty"` // "relaxed" (the default) or "strict"
}

// FileChild is a [[connection.children]].
type FileChild struct {
	Name         string   `toml:"name,omitempty"`
	LocalTS      []string `toml:"local_ts,omitempty"`
	RemoteTS     []string `toml:"remote_ts,omitempty"`
	ESPProposals string   `toml:"esp_proposals,omitempty"`
	StartAction  string   `toml:"start_action,omitempty"`
	RekeyTime    string   `toml:"rekey_time,omitempty"`
	LifeTime     string   `toml:"life_time,omitempty"`
	RekeyBytes   int64    `toml:"rekey_bytes,omitempty"`
	LifeBytes    int64    `toml:"life_bytes,omitempty"`
	RekeyPackets int64    `toml:"rekey_packets,omitempty"`
	LifePackets  int64    `toml:"life_packets,omitempty"`
}

// FilePool is a [[pool]]; Addrs is a prefix ("10.3.0.0/24") or a range
// ("10.3.0.10-10.3.0.200").
type FilePool struct {
	Name  string   `toml:"name,omitempty"`
	Addrs string   `toml:"addrs,omitempty"`
	DNS   []string `toml:"dns,omitempty"`
}

// FileSecret is a [[secret]]. Secret is the pre-shared key as the file
// writes it: text, "0x" and hex, or "0s" and base64; a key of arbitrary
// bytes must be written in hex or base64 (SecretHex), since TOML strings
// are UTF-8.
type FileSecret struct {
	Type   string   `toml:"type,omitempty"` // "ike", "private" or "eap"
	ID     string   `toml:"id,omitempty"`
	IDs    []string `toml:"ids,omitempty"`
	Secret string   `toml:"secret,omitempty"`
	File   string   `toml:"file,omitempty"`
}

// SecretHex writes a pre-shared key of arbitrary bytes as FileSecret.Secret
// takes it: "0x" followed by hex.
func SecretHex(key []byte) string { return fmt.Sprintf("0x%x", key) }

// FileTLS is a [[tls]] termination listener. IPv6Only nil is the default
// (true); SessionTickets nil is the default (true).
type FileTLS struct {
	Name              string        `toml:"name,omitempty"`
	Listen            string        `toml:"listen,omitempty"`
	IPv6Only          *bool         `toml:"ipv6_only,omitempty"`
	Backend           string        `toml:"backend,omitempty"`
	ProxyProtocol     bool          `toml:"proxy_protocol,omitempty"`
	Engine            string        `toml:"engine,omitempty"`
	Versions          []string      `toml:"versions,omitempty"` // "1.2", "1.3"
	ALPN              []string      `toml:"alpn,omitempty"`
	ClientAuth        string        `toml:"client_auth,omitempty"`
	ClientCA          string        `toml:"client_ca,omitempty"`
	SessionTickets    *bool         `toml:"session_tickets,omitempty"`
	TicketRotation    string        `toml:"ticket_rotation,omitempty"`
	HandshakeTimeout  string        `toml:"handshake_timeout,omitempty"`
	IdleTimeout       string        `toml:"idle_timeout,omitempty"`
	HeaderTimeout     string        `toml:"header_timeout,omitempty"`
	MaxConns          int           `toml:"max_conns,omitempty"`
	MaxConnsPerSource int           `toml:"max_conns_per_source,omitempty"`
	ServeDotfiles     bool          `toml:"serve_dotfiles,omitempty"`
	Certs             []FileTLSCert `toml:"cert,omitempty"`
}

// FileTLSCert is a [[tls.cert]]: a certificate file and its key file.
type FileTLSCert struct {
	Cert string `toml:"cert,omitempty"`
	Key  string `toml:"key,omitempty"`
}

// FileTLSOrigin is a [[tls_origin]] origination listener.
type FileTLSOrigin struct {
	Name              string   `toml:"name,omitempty"`
	Listen            string   `toml:"listen,omitempty"`
	IPv6Only          *bool    `toml:"ipv6_only,omitempty"`
	Backend           string   `toml:"backend,omitempty"`
	ServerName        string   `toml:"server_name,omitempty"`
	CA                string   `toml:"ca,omitempty"`
	Cert              string   `toml:"cert,omitempty"`
	Key               string   `toml:"key,omitempty"`
	Engine            string   `toml:"engine,omitempty"`
	Versions          []string `toml:"versions,omitempty"`
	ALPN              []string `toml:"alpn,omitempty"`
	HandshakeTimeout  string   `toml:"handshake_timeout,omitempty"`
	IdleTimeout       string   `toml:"idle_timeout,omitempty"`
	MaxConns          int      `toml:"max_conns,omitempty"`
	MaxConnsPerSource int      `toml:"max_conns_per_source,omitempty"`
}

// FileHA is the [ha] section. Preference 0 leaves the key out (the
// default, DefaultHAPreference), as does a group's.
type FileHA struct {
	Name        string        `toml:"name,omitempty"`
	Listen      string        `toml:"listen,omitempty"`
	Peer        string        `toml:"peer,omitempty"`
	Cert        string        `toml:"cert,omitempty"`
	Key         string        `toml:"key,omitempty"`
	CA          string        `toml:"ca,omitempty"`
	PeerName    string        `toml:"peer_name,omitempty"`
	Interval    string        `toml:"interval,omitempty"`
	Misses      int           `toml:"misses,omitempty"`
	Witness     string        `toml:"witness,omitempty"`
	Hook        string        `toml:"hook,omitempty"`
	HookTimeout string        `toml:"hook_timeout,omitempty"`
	Preference  int           `toml:"preference,omitempty"`
	Preempt     bool          `toml:"preempt,omitempty"`
	Groups      []FileHAGroup `toml:"group,omitempty"`
}

// FileHAGroup is a [[ha.group]]; Addresses are written
// "192.0.2.10/24 dev wan0".
type FileHAGroup struct {
	Name       string   `toml:"name,omitempty"`
	Addresses  []string `toml:"addresses,omitempty"`
	Preference int      `toml:"preference,omitempty"`
}

// Encode returns f as TOML. Every string is quoted and escaped, so a value
// holding quotes, brackets or newlines stays one value. It fails only for
// what TOML cannot hold: a string that is not valid UTF-8. It does not
// check the configuration: ParseGateway does.
func (f *File) Encode() ([]byte, error) {
	if path := invalidUTF8(reflect.ValueOf(f).Elem(), ""); path != "" {
		return nil, fmt.Errorf("config: encode: %s is not valid UTF-8 (TOML strings are UTF-8; write binary secrets with SecretHex)", path)
	}
	var b bytes.Buffer
	enc := toml.NewEncoder(&b)
	enc.SetIndentTables(false)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	return b.Bytes(), nil
}

// invalidUTF8 returns the field path ("tunnel[2].name") of the first
// string in v that is not valid UTF-8, or "".
func invalidUTF8(v reflect.Value, path string) string {
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return path
		}
	case reflect.Pointer:
		if !v.IsNil() {
			return invalidUTF8(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			key, _, _ := bytes.Cut([]byte(t.Field(i).Tag.Get("toml")), []byte(","))
			if p := invalidUTF8(v.Field(i), fieldPath(path, string(key))); p != "" {
				return p
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			if p := invalidUTF8(v.Index(i), elemPath(path, i)); p != "" {
				return p
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key().String()
			if !utf8.ValidString(k) {
				return path
			}
			if p := invalidUTF8(iter.Value(), fieldPath(path, k)); p != "" {
				return p
			}
		}
	}
	return ""
}
