package gateway

// Building runtime SAs (esp.SA) from the configuration's SA definitions.
// It lives here, above sad, so the SA database does not depend on the
// configuration file's types.

import (
	"fmt"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

// ESPConfig converts sa into the esp.Config it describes, with an engine key
// made by eng. The key belongs to the caller, who destroys it after the SA's
// last batch completes (DESIGN.md decision 6). The SA's sequence number
// seeds the outbound counter or the inbound replay window; the replay window
// applies inbound only.
func ESPConfig(eng cryptodev.Engine, sa *config.SA) (esp.Config, error) {
	cfg := esp.Config{
		SPI: sa.SPI, Src: sa.Src, Dst: sa.Dst, SPort: sa.SPort, DPort: sa.DPort,
		Alg: sa.Alg, ESN: sa.ESN, ReplayWindow: sa.ReplayWindow, Seq: sa.Seq,
	}
	switch sa.Mode {
	case config.ModeTunnel, "":
		cfg.Mode = esp.Tunnel
	case config.ModeTransport:
		cfg.Mode = esp.Transport
	default:
		return esp.Config{}, saError(sa, fmt.Errorf("unknown mode %q", sa.Mode))
	}
	switch sa.Encap {
	case config.EncapNone, "":
		cfg.Encap = esp.EncapNone
	case config.EncapUDP:
		cfg.Encap = esp.EncapUDP
	default:
		return esp.Config{}, saError(sa, fmt.Errorf("unknown encapsulation %q", sa.Encap))
	}
	if eng == nil {
		return esp.Config{}, saError(sa, fmt.Errorf("no engine"))
	}
	if !eng.Supports(sa.Alg) {
		return esp.Config{}, saError(sa, fmt.Errorf("engine %q does not support %s", eng.Name(), sa.Alg))
	}
	key, err := eng.NewKey(sa.Alg, sa.EncKey, sa.AuthKey)
	if err != nil {
		return esp.Config{}, saError(sa, err)
	}
	cfg.Key = key
	return cfg, nil
}

// OpenSA makes the runtime of sa for one direction, with its own engine
// key. The caller destroys the key (rt.Config().Key) after the SA's last
// batch completes.
func OpenSA(eng cryptodev.Engine, sa *config.SA, dir esp.Direction) (*esp.SA, error) {
	cfg, err := ESPConfig(eng, sa)
	if err != nil {
		return nil, err
	}
	return newRuntime(cfg, sa, dir)
}

// newRuntime makes the runtime of sa for one direction from its ESP
// configuration; on error it destroys the configuration's key.
func newRuntime(cfg esp.Config, sa *config.SA, dir esp.Direction) (*esp.SA, error) {
	var rt *esp.SA
	var err error
	if dir == esp.Outbound {
		rt, err = esp.NewOutbound(cfg)
	} else {
		rt, err = esp.NewInbound(cfg)
	}
	if err != nil {
		cfg.Key.Destroy()
		return nil, saError(sa, err)
	}
	return rt, nil
}

// saError places err at sa's table in its file, naming the SA:
// "FILE:LINE:COL: SA name (spi 0x00001001): ...".
func saError(sa *config.SA, err error) error {
	name := ""
	if sa.Name != "" {
		name = fmt.Sprintf("%q ", sa.Name)
	}
	return fmt.Errorf("%s: SA %s(spi 0x%08x): %w", sa.Pos, name, sa.SPI, err)
}
