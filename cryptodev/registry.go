package cryptodev

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Factory opens an engine with its defaults.
type Factory func() (Engine, error)

type registration struct {
	name     string
	priority int
	factory  Factory
}

var (
	regMu sync.Mutex
	regs  []registration
)

// Register makes an engine available by name. Engines register themselves
// in an init function; a higher priority wins when no engine is named.
func Register(name string, priority int, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	for _, r := range regs {
		if r.name == name {
			panic("cryptodev: engine registered twice: " + name)
		}
	}
	regs = append(regs, registration{name, priority, f})
	sort.SliceStable(regs, func(i, j int) bool { return regs[i].priority > regs[j].priority })
}

// Engines lists the registered engine names, highest priority first.
func Engines() []string {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]string, len(regs))
	for i, r := range regs {
		out[i] = r.name
	}
	return out
}

// Open opens the engine registered as name; an empty name opens the
// highest-priority engine.
func Open(name string) (Engine, error) {
	regMu.Lock()
	var f Factory
	for _, r := range regs {
		if name == "" || r.name == name {
			f = r.factory
			break
		}
	}
	names := make([]string, len(regs))
	for i, r := range regs {
		names[i] = r.name
	}
	regMu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("cryptodev: unknown engine %q (registered: %s)", name, strings.Join(names, ", "))
	}
	return f()
}
